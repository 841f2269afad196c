// `dpx train`: trains one model on one configuration, prints progress and test accuracy, and
// writes steps.csv, summary.csv, config.json (and with --profile-ops ops.csv) into --out, the
// weights to --save, a trace to --trace.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/data/datasets.hpp"
#include "core/stop.hpp"
#include "core/tensor.hpp"
#include "kernels/op_profile.hpp"
#include "parallel/train/job.hpp"
#include "parallel/bench/metrics.hpp"
#include "parallel/comm/nccl/nccl_backend.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"
#include "parallel/bench/report_io.hpp"
#include "parallel/train/trainer.hpp"
#include "tools/commands.hpp"
#include "tools/max_batch.hpp"
#include "tools/op_table.hpp"
#include "tools/print.hpp"
#include "tools/train_flags.hpp"
#include "zoo/weights.hpp"

namespace dpx::tools {

namespace {

// "0.286" or "0.485,0.456,0.406": a normalisation's values as the weights' metadata holds them.
std::string comma_list(const std::vector<float>& values) {
  std::ostringstream os;
  os.precision(9);
  for (size_t i = 0; i < values.size(); ++i) os << (i ? "," : "") << values[i];
  return os.str();
}

void run_train(parallel::TrainOptions o, const TrainFlags& f, parallel::ProcessGroup& processes) {
  if (processes.launched()) o.process_ranks = processes.size();
  apply_train_flags(o, f);
  o.validate();
  // GPUs for a thread per GPU, before anything is printed (under MPI each process checks its own).
  if (o.backend == parallel::Backend::nccl && !processes.launched()) parallel::check_nccl_gpus(o.ranks());
  if (o.backend == parallel::Backend::p2p)
    if (const std::string why = parallel::p2p_unavailable_reason(); !why.empty()) usage_fail("--backend p2p: ", why);
  const bool rank0 = processes.rank() == 0;
  refuse_profile_ops_with_cuda_graph(f.profile_ops, o.cuda_graph);
  ops::profile::set_enabled(f.profile_ops);
  ops::profile::set_by_shape(f.profile_shapes);
  if (!f.memory_budget.empty()) apply_host_memory_budget(parse_memory_size(f.memory_budget, "--memory-budget"));
  // Every output is checked (and its folder locked against a second run) before training, so a
  // bad path fails in a second, not after an hour.
  std::vector<std::unique_ptr<OutputLock>> locks;
  if (rank0) {  // rank 0 alone writes the run's files
    check_train_outputs(o, f);
    auto folder = [&](const std::string& dir, const char* flag, bool lock) {
      ensure_writable_dir(dir, flag);
      if (lock) locks.push_back(std::make_unique<OutputLock>(dir, flag));
    };
    auto parent = [](const std::string& file) { return std::filesystem::path(file).parent_path().string(); };
    if (!o.out_dir.empty()) folder(o.out_dir, "--out", true);
    if (!o.checkpoint_dir.empty()) folder(o.checkpoint_dir, "--checkpoint-dir", o.checkpoint_dir != o.out_dir);
    if (!o.save_file.empty()) folder(parent(o.save_file), "--save", false);
    if (!o.trace_file.empty()) folder(parent(o.trace_file), "--trace", false);
  }
  // Data, model and weights first: a missing file is then agreed on and said once, not by every rank.
  auto job = std::make_unique<parallel::Job>(o, processes.info().cores_per_rank);
  processes.agree(start_report("train", o.flag_values()));
  processes.set_comm_timeout(o.comm_timeout_s);
  if (rank0) {
    warn_if_oversubscribed(o, processes.info());
    print_config_box(std::cout, o, processes.info());
  }
  stop::Graceful graceful;  // the training loop stops at a step on a signal
  parallel::TrainReport report =
      parallel::train(*job, std::cout, processes.launched() ? &processes.world() : nullptr, processes.info());
  if (!rank0) {  // the others' reports hold their own steps only
    if (report.stopped_by) throw stop::Stopped(report.stopped_by);
    return;
  }
  parallel::Summary s = parallel::summarize(report);
  print_summary(std::cout, report, s);
  print_loader(std::cout, report, s);
  if (const size_t limit = host_reserve_limit(); limit > 0)
    std::cout << "memory budget: " << static_cast<double>(limit) / 1e6 << " MB (--memory-budget); the host block cache gave "
              << static_cast<double>(host_bytes_released_for_limit()) / 1e6
              << " MB of free blocks back to stay within it (asked of the system again when needed)\n";
  if (o.verbose) print_conv_choices(std::cout);
  std::vector<ops::profile::OpStats> op_stats;
  MeasuredSteps measured;
  if (f.profile_ops) {  // this process's ops: under MPI, rank 0's
    measured = measured_steps(report, processes.rank());
    op_stats = ops::profile::snapshot();
    std::cout << op_table(op_stats, measured) << peak_op_line();
  }
  if (!o.out_dir.empty()) {
    parallel::write_steps_csv(o.out_dir + "/steps.csv", report);
    parallel::write_summary_csv(o.out_dir + "/summary.csv", report, s);
    parallel::write_config_json(o.out_dir + "/config.json", report);
    if (f.profile_ops) write_file_atomic(o.out_dir + "/ops.csv", op_csv_header() + op_csv_rows(o.model, 1, op_stats, measured));
    std::cout << "wrote " << o.out_dir << "/{steps.csv, summary.csv, config.json" << (f.profile_ops ? ", ops.csv" : "")
              << "}\n";
  }
  if (!o.save_file.empty()) {
    const zoo::ModelOptions& mo = report.model_options;
    std::map<std::string, std::string> meta = {{"dpx_model", o.model}, {"num_classes", std::to_string(mo.num_classes)},
                                               {"in_channels", std::to_string(mo.in_channels)},
                                               {"image_size", std::to_string(mo.image_size)}, {"head", mo.head},
                                               {"dataset", o.dataset}};
    // How this run normalised its images, so that dpx infer makes its input alike.
    if (const data::Normalisation n = data::normalisation_of(parallel::Job::data_spec(o)); !n.mean.empty()) {
      meta["mean"] = comma_list(n.mean);
      meta["std"] = comma_list(n.std);
    }
    zoo::save_state(o.save_file, *report.final_model, meta);
    std::cout << "wrote weights " << o.save_file << " (" << report.final_model->num_parameters() << " parameters)\n";
  }
  if (!o.trace_file.empty()) {
    parallel::write_trace(o.trace_file, report, o.trace_first, o.trace_last);
    std::cout << "wrote trace " << o.trace_file << " (open in https://ui.perfetto.dev)\n";
  }
  if (report.stopped_by) {
    const int64_t done = report.steps.empty() ? 0 : report.steps.back().global_step + 1;
    std::cout << "stopped by " << stop::signal_name(report.stopped_by) << " after " << done << " steps";
    if (!report.checkpoint.empty())
      std::cout << "; checkpoint " << report.checkpoint << "\nresume with the same command and --resume "
                << o.checkpoint_dir;
    else
      std::cout << " (no --checkpoint-dir: nothing to resume from)";
    std::cout << std::endl;
    throw stop::Stopped(report.stopped_by);
  }
}

}  // namespace

void add_train_command(CLI::App& app, parallel::ProcessGroup& processes) {
  auto* cmd = app.add_subcommand("train", "train a model, timing every phase of every step");
  auto o = std::make_shared<parallel::TrainOptions>();
  auto f = std::make_shared<TrainFlags>();
  add_train_flags(*cmd, *o, *f, /*for_bench=*/false);
  cmd->callback([o, f, &processes] { run_train(*o, *f, processes); });
}

}  // namespace dpx::tools
