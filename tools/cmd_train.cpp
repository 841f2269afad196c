// `dpx train`: trains one model on one configuration, prints progress and test accuracy, and
// writes steps.csv, summary.csv, config.json (and a trace) into --out, the weights to --save.
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "core/atomic_file.hpp"
#include "parallel/job.hpp"
#include "parallel/metrics.hpp"
#include "parallel/report_io.hpp"
#include "parallel/trainer.hpp"
#include "tools/commands.hpp"
#include "tools/print.hpp"
#include "tools/train_flags.hpp"
#include "zoo/weights.hpp"

namespace dpx::tools {

namespace {

void run_train(parallel::TrainOptions o, const TrainFlags& f, parallel::ProcessGroup& processes) {
  if (processes.launched()) o.process_ranks = processes.size();
  apply_train_flags(o, f);
  o.validate();
  const bool rank0 = processes.rank() == 0;
  if (rank0) {  // rank 0 alone writes the run's files
    if (!o.out_dir.empty()) ensure_writable_dir(o.out_dir);
    if (!o.save_file.empty()) ensure_writable_dir(std::filesystem::path(o.save_file).parent_path().string());
  }
  // Data, model and weights first: a missing file is then agreed on and said once, not by every rank.
  std::unique_ptr<parallel::Job> job = parallel::prepare_job(o, processes.info());
  processes.agree(start_report("train", o.flag_values()));
  processes.set_comm_timeout(o.comm_timeout_s);
  if (rank0) {
    warn_if_oversubscribed(o, processes.info());
    print_config_box(std::cout, o, processes.info());
  }
  parallel::TrainReport report =
      parallel::train(*job, std::cout, processes.launched() ? &processes.world() : nullptr, processes.info());
  if (!rank0) return;  // the others' reports hold their own steps only
  parallel::Summary s = parallel::summarize(report);
  print_summary(std::cout, report, s);
  if (!o.out_dir.empty()) {
    parallel::write_steps_csv(o.out_dir + "/steps.csv", report);
    parallel::write_summary_csv(o.out_dir + "/summary.csv", report, s);
    parallel::write_config_json(o.out_dir + "/config.json", report);
    std::cout << "wrote " << o.out_dir << "/{steps.csv, summary.csv, config.json}\n";
  }
  if (!o.save_file.empty()) {
    const zoo::ModelOptions& mo = report.model_options;
    zoo::save_state(o.save_file, *report.final_model,
                    {{"dpx_model", o.model}, {"num_classes", std::to_string(mo.num_classes)},
                     {"in_channels", std::to_string(mo.in_channels)}, {"image_size", std::to_string(mo.image_size)},
                     {"head", mo.head}});
    std::cout << "wrote weights " << o.save_file << " (" << report.final_model->num_parameters() << " parameters)\n";
  }
  if (!o.trace_file.empty()) {
    parallel::write_trace(o.trace_file, report, o.trace_first, o.trace_last);
    std::cout << "wrote trace " << o.trace_file << " (open in https://ui.perfetto.dev)\n";
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
