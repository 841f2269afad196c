// `dpx bench --batch-sizes max` (tools/max_batch.hpp): measure two small batches, predict from the
// line through them, confirm, shrink while over the budget.
#include "tools/max_batch.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/cuda/memory.hpp"
#include "core/error.hpp"
#include "core/quote.hpp"
#include "core/stop.hpp"
#include "core/tensor.hpp"
#include "kernels/cpu/conv2d_algos.hpp"
#include "parallel/bench/metrics.hpp"
#include "parallel/train/trainer.hpp"

namespace dpx::tools {

namespace {

// What a batch needs: its live tensors' peak where measured, else its reserved peak.
double needed(const BatchPeak& p) { return static_cast<double>(p.live_bytes > 0 ? p.live_bytes : p.peak_bytes); }

}  // namespace

int64_t predict_max_batch(const BatchPeak& a, const BatchPeak& b, uint64_t budget, double headroom) {
  const double target = static_cast<double>(budget) * (1 - headroom);
  const double slope = (needed(b) - needed(a)) / static_cast<double>(b.batch - a.batch);
  if (!(slope > 0)) {  // no growth seen (noise): a step of 4 times the larger point, to see some
    return needed(b) <= target ? b.batch * 4 : 0;
  }
  const double base = needed(a) - slope * static_cast<double>(a.batch);
  const double most = std::floor((target - base) / slope);
  return most < 1 ? 0 : static_cast<int64_t>(std::min(most, 1e12));
}

uint64_t parse_memory_size(const std::string& text, const std::string& flag) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double number = std::strtod(s, &end);
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KB" || unit == "K") scale = 1e3;
  else if (unit == "MB" || unit == "M") scale = 1e6;
  else if (unit == "GB" || unit == "G") scale = 1e9;
  else if (unit == "TB" || unit == "T") scale = 1e12;
  else if (unit == "KIB") scale = 1024.0;
  else if (unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = number * scale;
  if (end == s || !std::isdigit(static_cast<unsigned char>(s[0])) || errno == ERANGE || scale == 0 ||
      !(bytes >= 1) || bytes > 1e15)
    usage_fail(flag, " '", excerpt(text), "': give a memory size such as 16GB, 512MB or 1.5GiB (GB = 10^9 bytes, "
               "GiB = 2^30)");
  return static_cast<uint64_t>(bytes);
}

uint64_t available_memory(Device device) {
  if (device.is_cuda()) {
    size_t free = 0, total = 0;
    cuda::device_memory(device.index, &free, &total);
    return free;
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  fail("--memory-budget: /proc/meminfo says no MemAvailable here; pass --memory-budget SIZE, e.g. 8GB");
}

namespace {

// One short run of `o` at `batch` per rank, from an empty cache: its reserved and live high-water marks.
BatchPeak measure(const parallel::TrainOptions& o, int64_t batch, std::ostream& log) {
  parallel::TrainOptions r = o.measuring_run();
  const int k = r.ranks();
  r.batch_size = batch * k;
  r.max_steps = 2;  // the first step allocates everything; the second reuses it, or shows what leaks
  r.warmup_steps = 1;
  if (r.dataset == "synthetic") r.synthetic_size = std::max<int64_t>(r.synthetic_size, 2 * batch * k);
  std::ostringstream quiet;  // train() starts from empty caches: the peak is this run's own
  const parallel::TrainReport report = parallel::train(r, quiet);
  if (report.stopped_by) throw stop::Stopped(report.stopped_by);
  const parallel::Summary s = parallel::summarize(report);
  const bool gpu = s.memory.device_reserved > 0;
  const BatchPeak peak{batch, gpu ? s.memory.device_reserved : s.memory.host_reserved,
                       gpu ? s.memory.device_allocated : s.memory.host_allocated};
  log << "    batch " << batch << " per rank: " << static_cast<double>(peak.peak_bytes) / 1e6 << " MB reserved, "
      << static_cast<double>(peak.live_bytes) / 1e6 << " MB of live tensors at its peak" << std::endl;
  return peak;
}

}  // namespace

void apply_host_memory_budget(uint64_t bytes) {
  set_host_reserve_limit(bytes);
  cpu::set_conv_workspace_limit(bytes / 8);
}

namespace {
constexpr int64_t kMaxStep = 8;  // the most a run's batch grows over the largest that fit
constexpr int kMaxTries = 6;      // runs after the first two
}  // namespace

MaxBatch search_max_batch(const std::function<BatchPeak(int64_t)>& measure, int64_t cap, uint64_t budget) {
  MaxBatch m;
  m.budget = budget;
  auto run = [&](int64_t b) {
    BatchPeak p = measure(b);
    p.batch = b;
    m.runs.push_back(p);
    return p;
  };
  const int64_t first = std::min<int64_t>(2, cap), second = std::min<int64_t>(4, cap);
  if (first < 1) {
    m.capped_by = "the data set: too few images for 2 steps of 1 image per rank";
    return m;
  }
  const BatchPeak a = run(first);
  if (a.peak_bytes > budget || second <= first) {  // even the smallest is over, or no room to measure a line
    if (a.peak_bytes <= budget) {
      m.batch = first;
      m.peak_bytes = a.peak_bytes;
      m.capped_by = "the data set";
    }
    return m;
  }
  const BatchPeak b = run(second);
  m.predicted = predict_max_batch(a, b, budget, 0.05);
  // The best measured so far that fits: the answer if the prediction is not above it.
  BatchPeak best = b.peak_bytes <= budget ? b : a;
  BatchPeak over = b.peak_bytes <= budget ? BatchPeak{} : b;  // the smallest batch measured over; batch 0: none
  int64_t next = m.predicted;
  if (next > cap) {
    next = cap;
    m.capped_by = "the data set (" + std::to_string(cap) + " images per rank for 2 steps)";
  }
  int overs = 0;  // runs that came out over the budget
  for (int tries = 0; tries < kMaxTries; ++tries) {
    // Never again at or past a batch that did not fit: between it and the best that did, instead.
    if (over.batch > 0 && next >= over.batch) next = best.batch + (over.batch - best.batch) / 2;
    // A line through small batches may be far off (AlexNet at 224x224: 3 MB an image between 2 and
    // 4, so 925 predicted under 4 GB, which peaked at 7.2 GB): at most 8 times the largest batch
    // that fit, so that no run goes far past what the measurements showed.
    next = std::min(next, kMaxStep * best.batch);
    if (next <= best.batch) break;
    const BatchPeak p = run(next);
    if (p.peak_bytes <= budget) {
      best = p;
      // Well under: small batches overstate the slope (fixed workspaces, rounding), so the line
      // from the smaller of them to this batch predicts again, upward; once a batch was over, the
      // line from this one to it (the slope where the budget is). What it needs decides: under a
      // budget the host cache's reserved bytes stay near it at every batch that fits.
      if (needed(p) >= 0.9 * static_cast<double>(budget)) break;
      next = over.batch > 0 ? predict_max_batch(p, over, budget, 0.05) : std::min(predict_max_batch(a, p, budget, 0.05), cap);
      continue;
    }
    if (over.batch == 0 || p.batch < over.batch) over = p;
    // Over: the line from the largest batch that fits to this one, with more headroom each time.
    next = predict_max_batch(best, p, budget, 0.05 * (++overs + 1));
  }
  m.batch = best.batch;
  m.peak_bytes = best.peak_bytes;
  return m;
}

MaxBatch find_max_batch(const parallel::TrainOptions& o, int64_t train_samples, uint64_t budget, std::ostream& log) {
  // A data set of files holds so many images: each rank's two steps must fit in its share.
  const int64_t cap = o.dataset == "synthetic" ? int64_t{1} << 40 : train_samples / o.ranks() / 2;
  return search_max_batch([&](int64_t b) { return measure(o, b, log); }, cap, budget);
}

}  // namespace dpx::tools
