// The epoch loop around train_step, the same for every trainer (see train_step.hpp): the
// steps of each epoch, the ranks' vote on a signal and the checkpoints after every update,
// evaluation on rank 0 after every epoch, and resuming from a checkpoint.
#include <algorithm>

#include "core/clock.hpp"
#include "core/stop.hpp"
#include "kernels/op_profile.hpp"
#include "kernels/ops.hpp"
#include "parallel/comm/gather.hpp"
#include "parallel/runtime/stop_vote.hpp"
#include "parallel/train/checkpoint.hpp"
#include "parallel/train/train_step.hpp"

namespace dpx::parallel {

namespace {

// A rank's part in checkpoints: which updates are due, and the collective save, in which every
// rank hands its random streams and its new step records to rank 0, which writes the file
// (checkpoint.hpp).
class RankCheckpoints {
 public:
  // `origin_s`: the run's start on rank 0's clock (a resumed run's is moved back by the time its
  // checkpoint had run), from which the saved record times count.
  RankCheckpoints(const Job& job, int rank, double origin_s)
      : job_(job), origin_s_(origin_s), last_update_(job.resume ? job.resume->progress.global_step : 0) {
    if (job.resume && rank == 0) records_ = job.resume->steps;
  }

  bool enabled() const { return !job_.options.checkpoint_dir.empty(); }

  // Called after every update, with the steps run so far: whether a checkpoint is due, every
  // --checkpoint-every steps (at the end of an accumulation group when that falls inside one).
  bool due_after_update(int64_t steps_done) {
    const int64_t every = job_.options.checkpoint_every, before = last_update_;
    last_update_ = steps_done;
    // A multiple of `every` passed since the last update: with --accumulate the updates come
    // every few steps, and each multiple is checkpointed once, at the update that covers it.
    return enabled() && every > 0 && steps_done / every > before / every;
  }

  // The checkpoint of position `at`, collective over `host` (null: one rank): rank 0 writes it,
  // notes it in the report and announces it.
  void save(Rank& r, Communicator* host, RunProgress at, const std::vector<StepRecord>& mine, TrainReport& report,
            std::mutex& report_mu, const TrainHooks& hooks) {
    nn::Model& model = r.model.master();
    RandomStreams streams = random_streams(model);
    if (r.graphs) {  // --cuda-graph: the steps' draws are counted on the device (train_step.cpp)
      const auto drawn = static_cast<uint64_t>(r.graphs->counter().to(Device::cpu()).data<int64_t>()[0]);
      for (auto& [name, state] : streams) state.draws += drawn;
    }
    std::vector<nn::RandomState> states;
    for (const auto& [name, state] : streams) states.push_back(state);
    const std::vector<StepRecord> fresh(mine.begin() + static_cast<std::ptrdiff_t>(saved_), mine.end());
    saved_ = mine.size();
    using States = std::vector<nn::RandomState>;
    using Records = std::vector<StepRecord>;
    const std::vector<States> all_states = host ? gather_records(*host, states) : std::vector<States>{states};
    const std::vector<Records> all_records = host ? gather_records(*host, fresh) : std::vector<Records>{fresh};
    if (r.rank != 0) return;

    Checkpoint c;
    c.options = job_.options.flag_values();
    c.ranks = job_.ranks;
    if (r.scaler && r.scaler->dynamic()) {
      at.loss_scale = r.scaler->scale();
      at.loss_scale_good_updates = r.scaler->good_updates();
    }
    c.progress = at;
    c.progress.elapsed_s = now_s() - origin_s_;  // origin is on rank 0's clock, which is this one's
    for (auto& [name, t] : model.state_dict()) c.model[name] = t;
    c.optimizer = r.optimizer.state();
    for (size_t q = 0; q < all_states.size(); ++q) {
      DPX_CHECK(all_states[q].size() == streams.size(), "checkpoint: rank ", q, " has ", all_states[q].size(),
                " random streams, rank 0 ", streams.size());
      RandomStreams& rank_streams = c.random.emplace_back();
      for (size_t i = 0; i < streams.size(); ++i) rank_streams.emplace_back(streams[i].first, all_states[q][i]);
      for (StepRecord rec : all_records[q]) {  // times from the run's start, so a resumed run can place them
        rec.start_s -= origin_s_;
        rec.backward_end_s -= origin_s_;
        records_.push_back(rec);
      }
    }
    if (at.epoch < job_.options.epochs) c.order = r.loader.epoch_order(at.epoch);
    c.steps = records_;
    std::lock_guard<std::mutex> lock(report_mu);
    c.epochs = report.epochs;
    report.checkpoint = write_checkpoint(job_.options.checkpoint_dir, c, job_.options.keep_checkpoints);
    if (hooks.on_checkpoint) hooks.on_checkpoint(report.checkpoint);
  }

 private:
  const Job& job_;
  const double origin_s_;
  int64_t last_update_;              // steps run at the previous update
  size_t saved_ = 0;                 // records of the rank's own list already handed over
  std::vector<StepRecord> records_;  // rank 0: every rank's records saved so far, times from origin_s
};

// The test set on rank 0 after an epoch (sequential, as in the studies: docs/ARCHITECTURE.md,
// Studies; the other ranks wait): the model in eval mode over the whole set, in order.
void evaluate_epoch(Rank& r, EpochRecord& er) {
  const Job& job = r.job;
  const double t = now_s();
  // Thread ranks (and DataParallel's replicas): the evaluation may use every rank's threads,
  // since the others wait. An MPI process has its own cores only.
  Context ctx = r.env.ctx();
  if (ctx.device.is_cpu() && job.options.process_ranks == 0) ctx.threads = job.threads_per_rank * job.ranks;
  nn::Model& model = r.model.master();
  const data::Dataset& test_set = *job.test_set;
  data::LoaderOptions lo;
  lo.batch_size = std::min<int64_t>(std::max<int64_t>(r.loader.options().batch_size, 256), test_set.size());
  lo.shuffle = false;
  lo.drop_last = false;
  lo.num_workers = 1;
  data::DataLoader loader(std::shared_ptr<const data::Dataset>(&test_set, [](const data::Dataset*) {}), lo);
  loader.start_epoch(0);
  model.eval();
  nn::CrossEntropyLoss criterion;
  double loss_sum = 0;
  int64_t correct = 0, samples = 0;
  while (auto batch = loader.next()) {
    Tensor images = batch->images, labels = batch->labels;
    if (!ctx.device.is_cpu()) {
      images = images.to(ctx.device);
      labels = labels.to(ctx.device);
    }
    const Tensor logits = model.forward(ctx, images);
    const int64_t n = images.size(0);
    loss_sum += criterion.forward(ctx, logits, labels) * static_cast<double>(n);
    correct += ops::count_correct(ctx, logits, labels);
    samples += n;
  }
  model.root().clear_cache();
  model.train();
  er.eval_s = now_s() - t;
  er.test_accuracy = samples > 0 ? static_cast<double>(correct) / static_cast<double>(samples) : 0;
  er.test_loss = samples > 0 ? loss_sum / static_cast<double>(samples) : 0;
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
        checkpoints.save(r, host, {epoch, step + 1, global_step + 1, loss_sum, 0}, mine, report, report_mu, hooks);
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
      checkpoints.save(r, host, {epoch + 1, 0, global_step, 0, 0}, mine, report, report_mu, hooks);
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
