// The training driver: prepares the job, runs it (run_spmd: single replica and
// DistributedDataParallel; run_data_parallel: DataParallel; both run the one train_loop and
// train_step, train_step.hpp), fills in the `wait` phase (fill_wait_times, metrics.hpp) and
// prints progress on rank 0.
#include "parallel/train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "core/clock.hpp"
#include "core/cpu_use.hpp"
#include "core/error.hpp"
#include "parallel/bench/metrics.hpp"
#include "parallel/train/job.hpp"
#include "parallel/train/train_step.hpp"

namespace dpx::parallel {

namespace {

// This process and the other ranks on its node: the processes whose CPU time is the run's own.
std::vector<int> run_pids(const LaunchInfo& launch) {
  std::vector<int> pids = {static_cast<int>(getpid())};
  for (size_t q = 1; q < launch.pids.size() && q < launch.node_of_rank.size(); ++q)
    if (launch.node_of_rank[q] == launch.node_of_rank[0]) pids.push_back(launch.pids[q]);
  return pids;
}

std::string format_duration(double s) {
  char buf[32];
  int total = static_cast<int>(std::lround(std::max(0.0, s)));
  if (total >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", total / 3600, total / 60 % 60);
  else
    std::snprintf(buf, sizeof buf, "%dm%02ds", total / 60, total % 60);
  return buf;
}

// Progress lines at a steady cadence, and epoch lines; called on rank 0 only.
class Progress {
 public:
  Progress(std::ostream& log, const Job& job)
      : log_(log), job_(job), scaling_(job.options.loss_scaling().has_value()) {}

  void step(const StepRecord& r, bool force) {
    images_ += r.images * job_.ranks;
    skipped_ += r.update_skipped ? 1 : 0;
    double now = now_s();
    if (!force && now - last_ < job_.options.log_interval_s) return;
    double rate = static_cast<double>(images_ - last_images_) / std::max(1e-9, now - last_);
    last_ = now;
    last_images_ = images_;
    int64_t done = r.epoch * job_.steps_per_epoch + r.step + 1;
    int64_t total = job_.options.epochs * job_.steps_per_epoch;
    double eta = (now - start_) / static_cast<double>(done) * static_cast<double>(total - done);
    char line[256];
    std::snprintf(line, sizeof line, "epoch %lld/%d | step %lld/%lld | loss %.4f | %.1f img/s | ETA %s",
                  static_cast<long long>(r.epoch + 1), job_.options.epochs, static_cast<long long>(r.step + 1),
                  static_cast<long long>(job_.steps_per_epoch), r.loss, rate, format_duration(eta).c_str());
    std::ostringstream os;
    os << line;
    if (scaling_) os << " | loss scale " << std::setprecision(10) << r.loss_scale << ", " << skipped_ << " skipped";
    log_ << os.str() << std::endl;
  }

  void epoch(const EpochRecord& e) {
    std::ostringstream os;
    os << "epoch " << e.epoch + 1 << "/" << job_.options.epochs << " done | train loss " << std::fixed
       << std::setprecision(4) << e.train_loss << " | " << std::setprecision(1) << e.time_s << " s";
    if (e.test_accuracy >= 0)
      os << " | test accuracy " << std::setprecision(2) << 100.0 * e.test_accuracy << " % (loss "
         << std::setprecision(4) << e.test_loss << ", " << std::setprecision(1) << e.eval_s << " s)";
    log_ << os.str() << std::endl;
  }

 private:
  std::ostream& log_;
  const Job& job_;
  double start_ = now_s(), last_ = now_s();
  int64_t images_ = 0, last_images_ = 0;
  const bool scaling_;   // --loss-scale: the line ends with the scale and the updates skipped
  int64_t skipped_ = 0;
};

}  // namespace

void sort_steps(std::vector<StepRecord>& steps) {
  std::stable_sort(steps.begin(), steps.end(), [](const StepRecord& a, const StepRecord& b) {
    return a.global_step != b.global_step ? a.global_step < b.global_step : a.rank < b.rank;
  });
}

std::vector<float> TrainReport::final_params() const {
  return final_model ? final_model->flat_params().to_vector() : std::vector<float>{};
}

TrainReport train(const TrainOptions& options, std::ostream& log, Communicator* processes, const LaunchInfo& launch) {
  Job job(options, launch.cores_per_rank);
  return train(job, log, processes, launch);
}

TrainReport train(Job& job, std::ostream& log, Communicator* processes, const LaunchInfo& launch) {
  const TrainOptions& options = job.options;
  if (processes && processes->size() != options.ranks())
    fail("train: a communicator of ", processes->size(), " processes for ", options.ranks(), " ranks");
  TrainReport report;
  report.launch = launch;
  report.options = options;
  report.ranks = job.ranks;
  report.threads_per_rank = job.threads_per_rank;
  report.num_parameters = job.initial.num_parameters();
  report.num_trainable = job.initial.num_trainable();
  report.train_samples = job.train_set->size();
  report.steps_per_epoch = job.steps_per_epoch;
  report.model_options = job.model_options;
  if (!options.weights_file.empty())
    log << "weights " << options.weights_file << ": " << zoo::describe_load(job.weights_report) << std::endl;

  Progress progress(log, job);
  // What other processes took of the cores during the measured steps (core/cpu_use.hpp): sampled
  // at the start, again when the warm-up ends, and after each epoch's last step (or, in a run a
  // signal stopped, when it returns), on rank 0 for the ranks of its node.
  const std::vector<int> node_pids = run_pids(launch);
  CpuSample cpu_start = sample_cpu(node_pids), cpu_end;
  TrainHooks hooks{[&](const StepRecord& r, bool last) {
                     progress.step(r, last);
                     if (r.global_step + 1 == options.warmup_steps) cpu_start = sample_cpu(node_pids);
                     if (last) cpu_end = sample_cpu(node_pids);
                   },
                   [&](const EpochRecord& e) { progress.epoch(e); },
                   [&](const std::string& path) { log << "checkpoint " << path << std::endl; }};
  // The high-water marks of this run: what the job holds already (the model, the data's index)
  // and what its steps add. A process's earlier runs (dpx bench's other configurations, the
  // --batch-sizes max search) do not count, nor the blocks they left cached.
  reset_memory_peaks();
  double start = now_s();
  // A resumed run continues the first one's timeline: its records keep their times.
  report.start_s = start - (job.resume ? job.resume->progress.elapsed_s : 0.0);
  if (job.resume) {
    report.epochs = job.resume->epochs;
    log << "resuming from " << job.resume->path << " at epoch " << job.resume->progress.epoch + 1 << " step "
        << job.resume->progress.step << " (global step " << job.resume->progress.global_step << ")" << std::endl;
  } else if (options.resume == "auto") {
    log << "--resume auto: no checkpoint in " << options.checkpoint_dir << " yet; starting from the first step"
        << std::endl;
  }
  if (options.parallel == ParallelMode::dp) {
    run_data_parallel(job, report, hooks);
  } else {
    run_spmd(job, report, hooks, processes);
    if (job.resume && (!processes || processes->rank() == 0)) {  // the steps before the checkpoint
      for (StepRecord r : job.resume->steps) {
        r.start_s += report.start_s;
        r.backward_end_s += report.start_s;
        report.steps.push_back(r);
      }
      sort_steps(report.steps);
    }
  }
  fill_wait_times(report);
  report.wall_s = now_s() - start;
  if (report.stopped_by && !cpu_end.valid) cpu_end = sample_cpu(node_pids);
  report.other_cpu_share = other_cpu_share(cpu_start, cpu_end);
  if (options.loss_threshold > 0) {
    for (const auto& r : report.steps) {
      if (r.rank == 0 && r.loss < options.loss_threshold) {
        report.threshold_step = r.global_step;
        report.threshold_epoch = r.epoch;
        break;
      }
    }
  }
  return report;
}

}  // namespace dpx::parallel
