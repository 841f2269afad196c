// `dpx bench --profile-ops`'s and `dpx train --profile-ops`'s table and ops.csv (see op_table.hpp).
#include "tools/op_table.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.hpp"

namespace dpx::tools {

namespace {
struct Row {
  double total_ms, ms_per_step, percent, gflops;  // gflops < 0: not defined
  double host_ms_per_step, kernels_per_step;      // kernels_per_step < 0: unknown
};
Row row_of(const ops::profile::OpStats& op, const MeasuredSteps& steps) {
  Row r;
  const double n = steps.records > 0 ? static_cast<double>(steps.records) : 0;
  r.total_ms = op.total_s * 1e3;
  r.ms_per_step = n > 0 ? r.total_ms / n : 0;
  r.percent = steps.step_s > 0 ? 100.0 * op.total_s / steps.step_s : 0;
  r.gflops = op.has_flops && op.total_s > 0 ? op.flops / op.total_s * 1e-9 : -1;
  r.host_ms_per_step = n > 0 ? op.host_s * 1e3 / n : 0;
  r.kernels_per_step = op.kernels < 0 ? -1 : n > 0 ? static_cast<double>(op.kernels) / n : 0;
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
  int width = 7;  // "all ops"
  bool gpu = false, shapes = false;
  for (const auto& op : ops) {
    width = std::max(width, static_cast<int>(op.name.size()));
    gpu = gpu || op.on_gpu;
    shapes = shapes || !op.shape.empty();
  }
  std::ostringstream os;
  char line[320];
  std::snprintf(line, sizeof line, "    %-*s %9s %11s %11s %7s %9s %10s %10s%s\n", width, "op", "calls", "total ms",
                "ms/step", "% step", "GFLOP/s", "host ms", "kernels", shapes ? "  shape" : "");
  os << line;
  double total_ms = 0, percent = 0, host_ms = 0, kernels = 0;
  bool kernels_known = !ops.empty();
  auto per_step = [&](double v) { return steps.records > 0 ? v / static_cast<double>(steps.records) : 0; };
  for (const auto& op : ops) {
    const Row r = row_of(op, steps);
    total_ms += r.total_ms;
    percent += r.percent;
    host_ms += op.host_s * 1e3;
    if (op.kernels >= 0) kernels += static_cast<double>(op.kernels);
    else kernels_known = false;
    char gflops[32] = "-", kernel_text[32] = "-";
    if (r.gflops >= 0) std::snprintf(gflops, sizeof gflops, "%.2f", r.gflops);
    if (r.kernels_per_step >= 0) std::snprintf(kernel_text, sizeof kernel_text, "%.1f", r.kernels_per_step);
    std::snprintf(line, sizeof line, "    %-*s %9lld %11.2f %11.3f %7.2f %9s %10.3f %10s", width, op.name.c_str(),
                  static_cast<long long>(op.calls), r.total_ms, r.ms_per_step, r.percent, gflops, r.host_ms_per_step,
                  kernel_text);
    os << line << (op.shape.empty() ? "" : "  ") << op.shape << "\n";
  }
  char kernel_total[32] = "-";
  if (kernels_known) std::snprintf(kernel_total, sizeof kernel_total, "%.1f", per_step(kernels));
  std::snprintf(line, sizeof line, "    %-*s %9s %11.2f %11.3f %7.2f %9s %10.3f %10s\n", width, "all ops", "", total_ms,
                per_step(total_ms), percent, "", per_step(host_ms), kernel_total);
  os << line;
  os << "    (" << steps.records << " measured step records, warmup excluded; ms/step, host ms and kernels per rank "
     << "and step; " << (shapes ? "a row per op and call shape: its tensors' shapes in argument order, - for none; " : "")
     << (gpu ? "GPU ops: ms is the GPU time between CUDA events around the op, host ms the time the host spent "
               "issuing it, kernels those CUPTI saw it launch (\"-\": unknown); "
             : "host ms = ms on the CPU; ")
     << "the rest of the step is outside the ops: layers' glue, data, communication)\n";
  return os.str();
}

void refuse_profile_ops_with_cuda_graph(bool profile_ops, bool cuda_graph) {
  if (profile_ops && cuda_graph)
    usage_fail("--profile-ops times each op as it is launched, and --cuda-graph replays the step's ops as one launch: "
               "profile without --cuda-graph, and compare the two with dpx bench");
}

std::string peak_op_line() {
  const ops::profile::PeakOp peak = ops::profile::peak_op();
  if (peak.name.empty()) return "";
  char line[256];
  std::snprintf(line, sizeof line, "memory high-water mark of the measured steps: %.1f MB of %s in use, reached in %s\n",
                static_cast<double>(peak.bytes) / 1e6, peak.on_gpu ? "the GPU's allocator" : "live host tensors",
                peak.name.c_str());
  return line;
}

std::string op_csv_header() {
  return "configuration,run,op,calls,total_ms,ms_per_step,percent_of_step,gflops,host_ms_per_step,kernels_per_step,"
         "shape\n";
}

std::string op_csv_current(const std::string& text) {
  const std::string old_header =
      "configuration,run,op,calls,total_ms,ms_per_step,percent_of_step,gflops,host_ms_per_step,kernels_per_step\n";
  if (!text.starts_with(old_header)) return text;
  std::string out = op_csv_header();
  std::istringstream in(text.substr(old_header.size()));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out += line + ",\n";
  return out;
}

std::string op_csv_rows(const std::string& configuration, int run, const std::vector<ops::profile::OpStats>& ops,
                        const MeasuredSteps& steps) {
  std::ostringstream os;
  os.precision(9);
  for (const auto& op : ops) {
    const Row r = row_of(op, steps);
    os << configuration << "," << run << "," << op.name << "," << op.calls << "," << r.total_ms << ","
       << r.ms_per_step << "," << r.percent << ",";
    if (r.gflops >= 0) os << r.gflops;
    os << "," << r.host_ms_per_step << ",";
    if (r.kernels_per_step >= 0) os << r.kernels_per_step;
    os << "," << op.shape << "\n";  // digits, x, -, spaces and letters: nothing to quote
  }
  return os.str();
}

}  // namespace dpx::tools
