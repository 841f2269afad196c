// The summary metrics and the `wait` phase, each with its one definition (see metrics.hpp;
// docs/measuring.md, Metrics).
#include "parallel/bench/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace dpx::parallel {

void fill_wait_times(TrainReport& report) {
  const bool every_step = report.options.parallel == ParallelMode::dp;
  std::map<int64_t, double> latest;  // global step -> the slowest rank's end of backward
  for (const auto& r : report.steps) {
    auto [it, fresh] = latest.try_emplace(r.global_step, r.backward_end_s);
    if (!fresh) it->second = std::max(it->second, r.backward_end_s);
  }
  for (auto& r : report.steps)
    r.times[Phase::wait] = r.optimizer_step || every_step ? latest[r.global_step] - r.backward_end_s : 0.0;
}

Summary summarize(const TrainReport& report) {
  Summary s;
  s.ranks = report.ranks;
  s.other_cpu_share = report.other_cpu_share;
  const int64_t warmup = report.options.warmup_steps;
  std::vector<double> useful(static_cast<size_t>(report.ranks), 0), runtime(static_cast<size_t>(report.ranks), 0);
  std::vector<int64_t> counted(static_cast<size_t>(report.ranks), 0);
  double images = 0, bytes_rank0 = 0;
  int64_t steps_rank0 = 0, updates_rank0 = 0;
  for (const auto& r : report.steps) {
    s.memory.raise_to(r.memory);
    if (r.global_step < warmup) continue;
    size_t k = static_cast<size_t>(r.rank);
    for (int p = 0; p < kPhaseCount; ++p) s.mean_s[p] += r.times.s[p];
    useful[k] += r.times[Phase::forward] + r.times[Phase::backward] + r.times[Phase::optimizer];
    runtime[k] += r.times[Phase::step];
    images += static_cast<double>(r.images);
    if (r.optimizer_step) ++counted[k];
    if (r.rank == 0) {
      bytes_rank0 += static_cast<double>(r.comm_bytes);
      ++steps_rank0;
      updates_rank0 += r.optimizer_step ? 1 : 0;
    }
  }
  s.measured_steps = counted.empty() ? 0 : counted[0];
  if (steps_rank0 > 0) {
    for (double& m : s.mean_s) m /= static_cast<double>(steps_rank0 * report.ranks);
    double T = *std::max_element(runtime.begin(), runtime.end());
    double max_u = *std::max_element(useful.begin(), useful.end());
    double mean_u = 0;
    for (double u : useful) mean_u += u / static_cast<double>(useful.size());
    if (T > 0) {
      s.images_per_s = images / T;
      s.comm_efficiency = max_u / T;
      s.parallel_efficiency = mean_u / T;
    }
    if (max_u > 0) s.load_balance = mean_u / max_u;
  }
  // A whole epoch, N / (B·k) steps, even when --steps cut the run short.
  const int64_t rank_batch = report.options.batch_size / report.ranks;
  const double epoch_steps = static_cast<double>(report.train_samples / report.ranks / rank_batch);
  // One all-reduce per update: every --accumulate micro-steps, and after the epoch's last.
  const double updates = std::ceil(epoch_steps / static_cast<double>(report.options.accumulate));
  // Counted: what an update sent, times the epoch's updates (a run --steps cut short updates after
  // its last micro-step too, so its bytes per micro-step would overstate an epoch's). Gradients
  // are sent on updates only: without one among the measured steps, nothing was sent (0).
  if (updates_rank0 > 0) s.bytes_per_epoch_counted = bytes_rank0 / static_cast<double>(updates_rank0) * updates;
  // sizeof(dtype): that of the gradients' all-reduce (--grad-dtype: 2 bytes for bf16 and fp16).
  const double grad_bytes = static_cast<double>(dtype_size(report.options.grad_dtype));
  s.bytes_per_epoch_formula =
      report.ranks > 1 ? updates * static_cast<double>(report.num_trainable) * grad_bytes : 0.0;
  if (!report.epochs.empty()) {
    s.final_loss = report.epochs.back().train_loss;
    s.test_accuracy = report.epochs.back().test_accuracy;
  }
  return s;
}

void with_baseline(Summary& s, const Summary& baseline) {
  if (baseline.images_per_s <= 0) return;
  s.speedup = s.images_per_s / baseline.images_per_s;
  s.scaling_efficiency = s.speedup * baseline.ranks / s.ranks;
}

}  // namespace dpx::parallel
