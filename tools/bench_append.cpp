// dpx bench --append (see bench_append.hpp).
#include "tools/bench_append.hpp"

#include <fstream>
#include <sstream>

#include "analysis/csv_table.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"
#include "parallel/train/train_options.hpp"
#include "tools/op_table.hpp"

namespace dpx::tools {

namespace {

// A command line without the flags that may differ between a sweep and its --append.
std::string sweep_of(const std::string& command) {
  std::istringstream in(command);
  std::string out, word;
  bool skip = false;
  while (in >> word) {
    if (skip) {
      skip = false;
      continue;
    }
    if (word == "--append" || word == "--force" || word.rfind("--repeat=", 0) == 0) continue;
    if (word == "--repeat") {
      skip = true;
      continue;
    }
    out += (out.empty() ? "" : " ") + word;
  }
  return out;
}

}  // namespace

EarlierRuns read_earlier_runs(const std::string& dir, const std::string& command,
                              const std::vector<parallel::TrainOptions>& configs) {
  const std::string runs_path = dir + "/runs.csv", command_path = dir + "/command.txt";
  if (!written_by_dpx(runs_path, FileKind::runs_csv) || !written_by_dpx(command_path, FileKind::command_txt))
    usage_fail("--append: --out '", dir, "' holds no earlier dpx bench run (its runs.csv and command.txt) to add "
               "repeats to; leave --append out");
  std::string earlier_command;
  {
    std::ifstream in(command_path);
    std::getline(in, earlier_command);
  }
  if (sweep_of(earlier_command) != sweep_of(command))
    usage_fail("--append adds repeats of the same sweep, and --out '", dir, "' holds another: it was made by\n  ",
               earlier_command, "\nrepeat that command with --append (a different --repeat is fine), or name another --out");
  const analysis::CsvTable t = analysis::CsvTable::read(runs_path, "--out");
  const size_t n = configs.size();
  if (n == 0 || t.rows() == 0 || t.rows() % n != 0)
    usage_fail("--append: '", runs_path, "' holds ", t.rows(), " runs, not whole repeats of this sweep's ", n,
               " configurations (an interrupted sweep): run it again with --force");
  EarlierRuns e;
  e.runs = static_cast<int>(t.rows() / n);
  e.summaries.resize(n);
  e.reports.resize(n);
  auto num = [&](size_t r, const char* c) { return t.number(r, t.column(c)); };
  for (size_t r = 0; r < t.rows(); ++r) {
    const size_t i = r % n;  // the sweep runs every configuration once per repeat, in order
    const parallel::TrainOptions& o = configs[i];
    if (t.text(r, t.column("model")) != o.model || t.text(r, t.column("devices")) != o.devices ||
        num(r, "batch_size") != static_cast<double>(o.batch_size))
      usage_fail("--append: '", runs_path, "' line ", t.line_of(r), " is ", t.text(r, t.column("model")), " on ",
                 t.text(r, t.column("devices")), ", where this sweep runs ", o.model, " on ", o.devices,
                 ": not the same sweep; run it again with --force");
    parallel::Summary s;
    s.ranks = static_cast<int>(num(r, "ranks"));
    s.measured_steps = static_cast<int64_t>(num(r, "measured_steps"));
    for (int p = 0; p < kPhaseCount; ++p)
      s.mean_s[static_cast<size_t>(p)] = num(r, ("mean_" + std::string(kPhaseNames[static_cast<size_t>(p)]) + "_s").c_str());
    s.images_per_s = num(r, "images_per_s");
    s.speedup = num(r, "speedup");
    s.scaling_efficiency = num(r, "scaling_efficiency");
    s.load_balance = num(r, "load_balance");
    s.comm_efficiency = num(r, "comm_efficiency");
    s.parallel_efficiency = num(r, "parallel_efficiency");
    s.bytes_per_epoch_formula = num(r, "bytes_per_epoch_formula");
    s.bytes_per_epoch_counted = num(r, "bytes_per_epoch_counted");
    s.final_loss = num(r, "final_loss");
    s.test_accuracy = num(r, "test_accuracy");
    s.memory.host_allocated = static_cast<uint64_t>(num(r, "peak_host_allocated_bytes"));
    s.memory.host_reserved = static_cast<uint64_t>(num(r, "peak_host_reserved_bytes"));
    s.memory.device_allocated = static_cast<uint64_t>(num(r, "peak_device_allocated_bytes"));
    s.memory.device_reserved = static_cast<uint64_t>(num(r, "peak_device_reserved_bytes"));
    s.other_cpu_share = t.text(r, t.column("other_cpu_share")).empty() ? -1 : num(r, "other_cpu_share");
    e.summaries[i].push_back(s);
    parallel::TrainReport report;  // what results.csv reads of a run besides its summary
    report.options = o;
    report.ranks = s.ranks;
    report.threads_per_rank = static_cast<int>(num(r, "threads_per_rank"));
    report.num_trainable = static_cast<int64_t>(num(r, "trainable_params"));
    report.threshold_step = static_cast<int64_t>(num(r, "threshold_step"));
    report.threshold_epoch = static_cast<int64_t>(num(r, "threshold_epoch"));
    report.wall_s = num(r, "wall_s");
    e.reports[i].push_back(std::move(report));
  }
  auto whole = [](const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  };
  e.runs_csv = whole(runs_path);
  // The same sweep profiled its ops or not (--profile-ops is part of the command): its rows stay.
  if (const std::string ops_path = dir + "/ops.csv"; written_by_dpx(ops_path, FileKind::ops_csv))
    e.ops_csv = op_csv_current(whole(ops_path));
  return e;
}

}  // namespace dpx::tools
