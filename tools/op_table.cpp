// `dpx bench --profile-ops`'s table and ops.csv (see op_table.hpp).
#include "tools/op_table.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace dpx::tools {

namespace {
struct Row {
  double total_ms, ms_per_step, percent, gflops;  // gflops < 0: not defined
};
Row row_of(const ops::profile::OpStats& op, const MeasuredSteps& steps) {
  Row r;
  r.total_ms = op.total_s * 1e3;
  r.ms_per_step = steps.records > 0 ? r.total_ms / static_cast<double>(steps.records) : 0;
  r.percent = steps.step_s > 0 ? 100.0 * op.total_s / steps.step_s : 0;
  r.gflops = op.has_flops && op.total_s > 0 ? op.flops / op.total_s * 1e-9 : -1;
  return r;
}
}  // namespace

MeasuredSteps measured_steps(const parallel::TrainReport& report, int process_rank) {
  const bool mpi = report.options.process_ranks > 0;
  MeasuredSteps m;
  for (const auto& r : report.steps) {
    if (r.global_step < report.options.warmup_steps || (mpi && r.rank != process_rank)) continue;
    ++m.records;
    m.step_s += r.times[Phase::step];
  }
  return m;
}

std::string op_table(const std::vector<ops::profile::OpStats>& ops, const MeasuredSteps& steps) {
  int width = 2;
  for (const auto& op : ops) width = std::max(width, static_cast<int>(op.name.size()));
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "    %-*s %9s %11s %11s %7s %9s\n", width, "op", "calls", "total ms", "ms/step",
                "% step", "GFLOP/s");
  os << line;
  double total_ms = 0, percent = 0;
  for (const auto& op : ops) {
    const Row r = row_of(op, steps);
    total_ms += r.total_ms;
    percent += r.percent;
    char gflops[32] = "-";
    if (r.gflops >= 0) std::snprintf(gflops, sizeof gflops, "%.2f", r.gflops);
    std::snprintf(line, sizeof line, "    %-*s %9lld %11.2f %11.3f %7.2f %9s\n", width, op.name.c_str(),
                  static_cast<long long>(op.calls), r.total_ms, r.ms_per_step, r.percent, gflops);
    os << line;
  }
  std::snprintf(line, sizeof line, "    %-*s %9s %11.2f %11.3f %7.2f\n", width, "all ops", "", total_ms,
                steps.records > 0 ? total_ms / static_cast<double>(steps.records) : 0, percent);
  os << line;
  os << "    (" << steps.records << " measured step records, warmup excluded; ms/step and % per rank and step; "
     << "the rest of the step is outside the ops: layers' glue, data, communication)\n";
  return os.str();
}

std::string op_csv_header() { return "configuration,run,op,calls,total_ms,ms_per_step,percent_of_step,gflops\n"; }

std::string op_csv_rows(const std::string& configuration, int run, const std::vector<ops::profile::OpStats>& ops,
                        const MeasuredSteps& steps) {
  std::ostringstream os;
  os.precision(9);
  for (const auto& op : ops) {
    const Row r = row_of(op, steps);
    os << configuration << "," << run << "," << op.name << "," << op.calls << "," << r.total_ms << ","
       << r.ms_per_step << "," << r.percent << ",";
    if (r.gflops >= 0) os << r.gflops;
    os << "\n";
  }
  return os.str();
}

}  // namespace dpx::tools
