// results.csv and the printed table of a `dpx bench` sweep (see bench_results.hpp).
#include "tools/bench_results.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "analysis/stats.hpp"
#include "core/cpu_use.hpp"
#include "core/error.hpp"
#include "parallel/bench/report_io.hpp"

namespace dpx::tools {

namespace {

// The most that other processes took of any run's cores (-1: not measured): one disturbed run
// marks its configuration.
double most_other_cpu_share(const std::vector<parallel::Summary>& runs) {
  double most = -1;
  for (const auto& r : runs) most = std::max(most, r.other_cpu_share);
  return most;
}

// The median over the runs of every measured field of the summaries (speedup and efficiency are
// set afterwards, from the medians' throughput).
parallel::Summary median_summary(const std::vector<parallel::Summary>& runs) {
  parallel::Summary m = runs.front();
  auto med = [&](auto field) {
    std::vector<double> xs;
    for (const auto& r : runs) xs.push_back(static_cast<double>(field(r)));
    return analysis::median(xs);
  };
  for (int p = 0; p < kPhaseCount; ++p) m.mean_s[p] = med([p](const parallel::Summary& r) { return r.mean_s[p]; });
  m.images_per_s = med([](const parallel::Summary& r) { return r.images_per_s; });
  m.load_balance = med([](const parallel::Summary& r) { return r.load_balance; });
  m.comm_efficiency = med([](const parallel::Summary& r) { return r.comm_efficiency; });
  m.parallel_efficiency = med([](const parallel::Summary& r) { return r.parallel_efficiency; });
  m.bytes_per_epoch_counted = med([](const parallel::Summary& r) { return r.bytes_per_epoch_counted; });
  m.final_loss = med([](const parallel::Summary& r) { return r.final_loss; });
  m.test_accuracy = med([](const parallel::Summary& r) { return r.test_accuracy; });
  m.speedup = m.scaling_efficiency = 1;
  for (const auto& r : runs) m.memory.raise_to(r.memory);  // a peak is the highest of any run
  m.other_cpu_share = most_other_cpu_share(runs);  // and a disturbance
  return m;
}

// results.csv's columns after summary_csv_header()'s, which hold the medians: how many runs, then
// for throughput and each phase's mean the 95 % confidence interval of the median (empty below 3
// runs) and the spread; the interval's exact coverage; the noisy flag; the disturbed flag (a run
// during whose measured steps other processes took more than kDisturbedShare of its cores).
std::string stats_csv_header() {
  std::string h = ",repeats";
  auto add = [&](const std::string& name) { h += "," + name + "_ci_lo," + name + "_ci_hi," + name + "_spread"; };
  add("images_per_s");
  for (auto name : kPhaseNames) add("mean_" + std::string(name) + "_s");
  return h + ",ci_coverage,noisy,disturbed";
}

// results.csv's last columns: the data loader of the configuration (its workers per rank, the
// images one worker produced per second of its own work, medians over the runs, and the images
// skipped as unreadable in all runs).
std::string loader_csv_header() { return ",workers,loader_images_per_worker_s,skipped_images"; }

// --batch-sizes max: the budget the batch was found under and what the line first predicted
// (empty for batches given).
std::string max_batch_csv_header() { return ",memory_budget_bytes,max_batch_predicted"; }
std::string max_batch_csv_row(const MaxBatch& m) {
  if (m.budget == 0) return ",,";
  return "," + std::to_string(m.budget) + "," + std::to_string(m.predicted);
}

std::string loader_csv_row(const parallel::TrainOptions& o, const std::vector<parallel::TrainReport>& runs) {
  std::vector<double> rates;
  int64_t skipped = 0;
  for (const auto& r : runs) {
    // Runs read back for --append carry no loader counts: the loader columns are this sweep's.
    if (r.loader.images_per_worker_s() > 0) rates.push_back(r.loader.images_per_worker_s());
    skipped += r.loader.skipped;
  }
  if (rates.empty()) rates.push_back(0);  // no loader thread counted (--workers 0)
  std::ostringstream os;
  os.precision(9);
  os << "," << o.workers << "," << analysis::median(rates) << "," << skipped;
  return os.str();
}

std::string stats_csv_row(const std::vector<parallel::Summary>& runs, double noisy_spread) {
  std::ostringstream os;
  os.precision(9);
  os << "," << runs.size();
  double coverage = 0;
  bool valid = false;
  auto add = [&](auto field) {
    std::vector<double> xs;
    for (const auto& r : runs) xs.push_back(field(r));
    const analysis::RepeatStats st = analysis::repeat_stats(xs);
    if (st.ci.valid) os << "," << st.ci.lo << "," << st.ci.hi;
    else os << ",,";
    os << "," << st.spread;
    valid = st.ci.valid;
    coverage = st.ci.coverage;
  };
  add([](const parallel::Summary& r) { return r.images_per_s; });
  for (int p = 0; p < kPhaseCount; ++p) add([p](const parallel::Summary& r) { return r.mean_s[p]; });
  std::vector<double> ips;
  for (const auto& r : runs) ips.push_back(r.images_per_s);
  os << ",";
  if (valid) os << coverage;
  os << "," << (analysis::is_noisy(ips, noisy_spread) ? 1 : 0);
  os << "," << (disturbed(most_other_cpu_share(runs)) ? 1 : 0);
  return os.str();
}

}  // namespace

std::string steps_file(const SweepConfig& c, int run, int repeat) {
  return (repeat > 1 ? detail::concat(c.tag, "_run", run) : c.tag) + ".csv";
}

std::string results_csv(const std::vector<SweepConfig>& configs, std::vector<parallel::Summary>& medians,
                        double noisy_spread) {
  std::ostringstream csv;
  csv << "scaling," << parallel::summary_csv_header() << stats_csv_header() << loader_csv_header()
      << max_batch_csv_header() << "\n";
  std::map<std::string, parallel::Summary> baselines;
  medians.assign(configs.size(), parallel::Summary{});
  for (size_t i = 0; i < configs.size(); ++i) {
    const SweepConfig& c = configs[i];
    if (c.summaries.empty()) continue;
    parallel::Summary m = median_summary(c.summaries);
    auto it = baselines.find(c.key);
    if (it == baselines.end()) baselines[c.key] = m;
    else parallel::with_baseline(m, it->second);
    parallel::TrainReport report = c.runs.front();
    std::vector<double> walls;
    for (const auto& r : c.runs) walls.push_back(r.wall_s);
    report.wall_s = analysis::median(walls);
    csv << c.scaling << "," << parallel::summary_csv_row(report, m) << stats_csv_row(c.summaries, noisy_spread)
        << loader_csv_row(c.o, c.runs) << max_batch_csv_row(c.max_batch) << "\n";
    medians[i] = m;
  }
  return csv.str();
}

void print_bench_table(std::ostream& os, const std::vector<SweepConfig>& configs,
                       const std::vector<parallel::Summary>& medians, int repeat, double noisy_spread) {
  int width = 28;
  for (const auto& c : configs) width = std::max(width, static_cast<int>(c.tag.size()));
  char line[512];
  std::snprintf(line, sizeof line,
                "\n%-*s %9s %6s %5s %7s %6s | %8s %8s %8s %8s %8s %8s %8s | %5s %5s %5s | %8s %7s\n", width, "configuration",
                "img/s", "spread", "noisy", "speedup", "eff", "load", "forward", "backward", "comm", "exposed", "optim",
                "wait", "LB", "CommE", "PE", "peak MB", "others");
  os << line;
  for (size_t i = 0; i < configs.size(); ++i) {
    if (configs[i].summaries.empty()) continue;
    const parallel::Summary& s = medians[i];
    std::vector<double> ips;
    for (const auto& r : configs[i].summaries) ips.push_back(r.images_per_s);
    const double spread = analysis::spread(ips);
    auto ms = [&](Phase p) { return s.mean_s[static_cast<int>(p)] * 1e3; };
    // A GPU configuration's peak is its GPU's; a CPU one's the host's.
    const uint64_t peak = s.memory.device_reserved > 0 ? s.memory.device_allocated : s.memory.host_allocated;
    char others[16] = "";
    if (s.other_cpu_share >= 0)
      std::snprintf(others, sizeof others, "%.0f%%%s", 100 * s.other_cpu_share, disturbed(s.other_cpu_share) ? "!" : "");
    std::snprintf(line, sizeof line,
                  "%-*s %9.1f %6.3f %5s %7.2f %6.3f | %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f | %5.3f %5.3f %5.3f | "
                  "%8.1f %7s\n",
                  width, configs[i].tag.c_str(), s.images_per_s, spread,
                  analysis::is_noisy(ips, noisy_spread) ? "yes" : "", s.speedup, s.scaling_efficiency, ms(Phase::load), ms(Phase::forward), ms(Phase::backward),
                  ms(Phase::comm_total), ms(Phase::comm_exposed), ms(Phase::optimizer), ms(Phase::wait),
                  s.load_balance, s.comm_efficiency, s.parallel_efficiency, static_cast<double>(peak) / 1e6, others);
    os << line;
  }
  os << "(ms per step, medians over " << repeat << (repeat == 1 ? " run" : " runs")
     << "; spread = (max - min) / median of img/s over the runs, noisy = spread above --noisy-spread "
     << noisy_spread << ";\n eff = scaling efficiency against the first row of the same configuration but devices;\n"
        " LB = load balance, CommE = communication efficiency, PE = parallel efficiency: docs/measuring.md, Metrics;\n"
        " peak MB = the most memory of live tensors at once, of any rank and run: the GPU's on a GPU, else the host "
        "process's; results.csv has the allocator's reserved bytes too;\n others = the share of the run's cores that "
        "other processes took during its measured steps, the most of any run; ! above 10 %: disturbed, the times are "
        "the busy machine's)\n";
}

}  // namespace dpx::tools
