// The epoch loop around train_step, the same for every trainer (see train_step.hpp): the
// steps of each epoch, the ranks' vote on a signal and the checkpoints after every update,
// evaluation on rank 0 after every epoch, and resuming from a checkpoint.
#include <algorithm>
#include <csignal>

#include "core/clock.hpp"
#include "core/stop.hpp"
#include "kernels/op_profile.hpp"
#include "parallel/train/evaluate.hpp"
#include "parallel/train/rank_checkpoints.hpp"
#include "parallel/runtime/stop_vote.hpp"
#include "parallel/train/train_step.hpp"

namespace dpx::parallel {

namespace {

// A checkpoint at position `at` (collective); rank 0 notes and announces the file.
void save_checkpoint(Rank& r, RankCheckpoints& checkpoints, Communicator* host, RunProgress at,
                     const std::vector<StepRecord>& mine, TrainReport& report, std::mutex& report_mu,
                     const TrainHooks& hooks) {
  if (r.scaler && r.scaler->dynamic()) {
    at.loss_scale = r.scaler->scale();
    at.loss_scale_good_updates = r.scaler->good_updates();
  }
  std::vector<EpochRecord> epochs;
  if (r.rank == 0) {
    std::lock_guard<std::mutex> lock(report_mu);
    epochs = report.epochs;
  }
  const std::string path = checkpoints.save(host, r.model.master(), r.optimizer, at, mine, epochs, r.loader);
  if (r.rank != 0) return;
  std::lock_guard<std::mutex> lock(report_mu);
  report.checkpoint = path;
  if (hooks.on_checkpoint) hooks.on_checkpoint(path);
}

// The test set on rank 0 after an epoch (sequential, as in the studies: docs/ARCHITECTURE.md,
// Studies; the other ranks wait).
void evaluate_epoch(Rank& r, EpochRecord& er) {
  const Job& job = r.job;
  const double t = now_s();
  // Thread ranks (and DataParallel's replicas): the evaluation may use every rank's threads,
  // since the others wait. An MPI process has its own cores only.
  Context& ctx = r.env.ctx();
  const bool threads = ctx.device.is_cpu() && job.options.process_ranks == 0;
  Context eval_ctx = ctx;
  if (threads) eval_ctx.threads = job.threads_per_rank * job.ranks;
  const int64_t batch = std::max<int64_t>(r.loader.options().batch_size, 256);
  const EvalResult ev = evaluate(eval_ctx, r.model.master(), *job.test_set, batch);
  er.eval_s = now_s() - t;
  er.test_accuracy = ev.accuracy;
  er.test_loss = ev.loss;
}

}  // namespace

// Times are recorded on rank 0's clock (Rank::clock). A resumed run (job.resume) starts at its
// checkpoint's step with its optimizer state and random streams; a run asked to stop (a signal:
// core/stop.hpp) stops after the same update on every rank, checkpointing first.
void train_loop(Rank& r, Communicator* host, Communicator* data, TrainReport& report, std::mutex& report_mu,
                const TrainHooks& hooks) {
  const Job& job = r.job;
  const TrainOptions& o = job.options;
  StopVote vote(host);
  // What the rank does, for stall reports of either communicator.
  auto say = [&](const std::string& what) {
    for (Communicator* c : {host, data})
      if (c) c->set_activity(what);
  };
  RankCheckpoints checkpoints(job, r.rank, report.start_s);
  const RunProgress start = job.resume ? job.resume->progress : RunProgress{};
  if (job.resume) {
    r.optimizer.load_state(job.resume->optimizer);
    set_random_streams(r.model.master(), job.resume->random.at(static_cast<size_t>(r.rank)));
    if (r.scaler && r.scaler->dynamic()) {
      if (!(start.loss_scale > 0))
        fail("--resume ", job.resume->path, ": the checkpoint holds no dynamic loss scale to continue from");
      r.scaler->restore(start.loss_scale, start.loss_scale_good_updates);
    }
    if (r.rank == 0 && start.epoch < o.epochs && job.resume->order != r.loader.epoch_order(start.epoch))
      fail("--resume ", job.resume->path, ": the data order of epoch ", start.epoch + 1,
           " differs from this run's (another data set, or another dpx version's shuffling)");
  }
  std::vector<StepRecord> mine;
  std::vector<TraceSpan> spans;  // --trace's steps
  int64_t global_step = start.global_step;
  int stopped_by = 0;
  for (int64_t epoch = start.epoch; epoch < o.epochs && !stopped_by; ++epoch) {
    r.model.train();
    const int64_t steps = job.steps_per_epoch, first = epoch == start.epoch ? start.step : 0;
    r.loader.start_epoch(epoch, first);
    double epoch_start = now_s(), loss_sum = epoch == start.epoch ? start.epoch_loss_sum : 0;
    for (int64_t step = first; step < steps; ++step, ++global_step) {
      say(detail::concat("training: epoch ", epoch + 1, " step ", step + 1));
      std::vector<StepRecord> records;
      const bool traced = !o.trace_file.empty() && global_step >= o.trace_first && global_step <= o.trace_last;
      r.trace = traced ? &spans : nullptr;
      {
        // The op profiler (--profile-ops) counts the measured steps, not the warmup, and leaves
        // a span per op of a traced step.
        ops::profile::Counting counted(global_step >= o.warmup_steps);
        ops::profile::Tracing tracing(traced);
        records = train_step(r, {epoch, step, global_step});
      }
      r.trace = nullptr;
      const StepRecord& rec = records.front();
      // The step's bucket all-reduces and ops, on rank 0's clock (buckets whose backend gave a start).
      std::vector<TraceSpan> buckets = r.grad_sync.take_bucket_spans();
      const std::vector<ops::profile::OpSpan> op_spans = ops::profile::take_spans();
      if (traced) {
        for (TraceSpan& b : buckets)
          if (b.start_s > 0) {
            b.rank = r.rank;
            b.global_step = global_step;
            b.start_s -= r.clock_offset_s;
            spans.push_back(b);
          }
        for (const ops::profile::OpSpan& op : op_spans)  // DataParallel's replica i: the trace's rank i
          spans.push_back({TraceSpan::Kind::op, r.rank + op.replica, global_step, op.op,
                           op.start_s - r.clock_offset_s, op.seconds, 0, 0});
      }
      loss_sum += rec.loss;
      mine.insert(mine.end(), records.begin(), records.end());
      if (r.rank == 0 && hooks.on_step) hooks.on_step(rec, step + 1 == steps);
      if (!rec.optimizer_step) continue;
      // After every update: the ranks vote on a signal, and checkpoint when asked or due.
      const int stop = vote.vote(stop::requested());
      // The epoch's last update is checkpointed at the epoch's end, after its evaluation.
      const bool due = checkpoints.due_after_update(global_step + 1) && step + 1 < steps;
      if (checkpoints.enabled() && (stop || due))
        save_checkpoint(r, checkpoints, host, {epoch, step + 1, global_step + 1, loss_sum, 0}, mine, report,
                        report_mu, hooks);
      if (stop) {
        stopped_by = stop;  // the signal a rank was asked by, the same on every rank
        ++global_step;
        break;
      }
    }
    if (stopped_by) break;
    EpochRecord er;
    er.epoch = epoch;
    er.time_s = now_s() - epoch_start;
    er.train_loss = steps > 0 ? loss_sum / static_cast<double>(steps) : 0;
    if (r.rank == 0 && o.evaluate && job.test_set) {
      say(detail::concat("evaluating the test set after epoch ", epoch + 1));
      evaluate_epoch(r, er);
    }
    if (host) host->barrier_patient(o.evaluate ? "rank 0 evaluates the test set" : "the end of the epoch");
    if (r.rank == 0) {
      std::lock_guard<std::mutex> lock(report_mu);
      report.epochs.push_back(er);
      if (hooks.on_epoch) hooks.on_epoch(er);
    }
    if (checkpoints.enabled())  // every epoch's end, evaluation included
      save_checkpoint(r, checkpoints, host, {epoch + 1, 0, global_step, 0, 0}, mine, report, report_mu, hooks);
  }
  std::lock_guard<std::mutex> lock(report_mu);
  report.steps.insert(report.steps.end(), mine.begin(), mine.end());
  report.trace_spans.insert(report.trace_spans.end(), spans.begin(), spans.end());
  if (r.rank == 0) {
    nn::Model& model = r.model.master();
    report.stopped_by = stopped_by;
    model.root().set_grad_ready_hook(nullptr);  // the hook points into this rank's GradSync
    report.final_model = std::make_shared<nn::Model>(std::move(model));
  }
}

}  // namespace dpx::parallel
