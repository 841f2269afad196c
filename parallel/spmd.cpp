// The SPMD training loop that every rank runs: load, forward, backward, gradient sync,
// optimizer — each phase timed. One rank with NoSync is the single-replica run; k ranks with
// DdpSync are DistributedDataParallel, the ranks being threads of this process or, under MPI,
// one per process.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <type_traits>

#include "core/clock.hpp"
#include "core/stop.hpp"
#include "core/data/loader.hpp"
#include "kernels/ops.hpp"
#include "layers/loss.hpp"
#include "layers/optim.hpp"
#include "parallel/ddp.hpp"
#include "parallel/device_env.hpp"
#include "parallel/evaluate.hpp"
#include "parallel/gather.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/process_group.hpp"
#include "parallel/rank_checkpoints.hpp"
#include "parallel/run_modes.hpp"
#include "parallel/threads_backend.hpp"

namespace dpx::parallel {

namespace {

// The divergence guard (--on-nonfinite) after a step's gradients are all-reduced: every rank
// holds the same gradients, so every rank decides alike (a rank whose loss was not finite made
// its gradients NaN, so its loss counts too). Returns true when the update must be skipped;
// throws a SharedFailure (stop) naming the step (1-based) and the first offending parameter.
// `bad_loss`: this rank's non-finite loss in the accumulation group, if any.
bool nonfinite_gradients(Context& ctx, nn::Model& model, const TrainOptions& o, int64_t global_step,
                         std::optional<double> bad_loss, int rank) {
  if (o.on_nonfinite == "ignore" || ops::count_nonfinite(ctx, model.flat_grads()) == 0) return false;
  std::string first = "?";
  for (const nn::ParamSlot& slot : model.slots()) {
    if (!slot.param->requires_grad) continue;
    if (ops::count_nonfinite(ctx, model.flat_grads().view_at(slot.offset, {slot.numel})) > 0) {
      first = slot.name;
      break;
    }
  }
  const std::string loss = bad_loss ? detail::concat("loss (", *bad_loss, ") and ") : "";
  const std::string what = detail::concat("non-finite ", loss, "gradients at step ", global_step + 1, " (first in ",
                                          first, o.ranks() > 1 ? ", after the all-reduce: every rank has them)" : ")");
  if (o.on_nonfinite == "stop")
    throw SharedFailure(1, what + "; lower --lr, or pass --on-nonfinite skip to skip such steps");
  if (rank == 0) std::fprintf(stderr, "dpx: warning: %s: update skipped (--on-nonfinite skip)\n", what.c_str());
  return true;
}

// A checkpoint at position `at` (collective); rank 0 notes and announces the file.
void save_checkpoint(RankCheckpoints& checkpoints, Communicator* comm, int rank, nn::Model& model,
                     const nn::Optimizer& optimizer, const RunProgress& at, const std::vector<StepRecord>& mine,
                     TrainReport& report, std::mutex& report_mu, const TrainHooks& hooks,
                     const data::DataLoader& loader) {
  std::vector<EpochRecord> epochs;
  if (rank == 0) {
    std::lock_guard<std::mutex> lock(report_mu);
    epochs = report.epochs;
  }
  const std::string path = checkpoints.save(comm, model, optimizer, at, mine, epochs, loader);
  if (rank != 0) return;
  std::lock_guard<std::mutex> lock(report_mu);
  report.checkpoint = path;
  if (hooks.on_checkpoint) hooks.on_checkpoint(path);
}

// One rank's whole run. `comm` is null for the single-replica run. Times are recorded on rank
// 0's clock: this rank's steady clock minus clock_offset_s. A resumed run (job.resume) starts at
// its checkpoint's step with its optimizer state and random streams; a run asked to stop (a
// signal: core/stop.hpp) stops after the same update on every rank, checkpointing first.
void rank_loop(const Job& job, int rank, Communicator* comm, GradSync& sync, TrainReport& report,
               std::mutex& report_mu, const TrainHooks& hooks, double clock_offset_s) {
  auto clock = [clock_offset_s] { return now_s() - clock_offset_s; };
  const TrainOptions& o = job.options;
  std::unique_ptr<DeviceEnv> env = make_device_env(o.device(), job.threads_per_rank, o.allow_tf32);
  Context& ctx = env->ctx();
  nn::Model model = job.initial.clone(ctx.device);
  if (comm) {  // every replica starts from rank 0's weights, as DDP's constructor broadcasts
    comm->broadcast(model.flat_params(), 0);
    for (auto& [name, buffer] : model.root().named_buffers()) comm->broadcast(*buffer, 0);
  }
  sync.attach(model);
  std::unique_ptr<nn::Optimizer> optimizer = job.make_optimizer(model);
  nn::CrossEntropyLoss criterion(o.label_smoothing);
  data::DataLoader loader(job.train_set, job.train_loader(rank, job.ranks, job.rank_batch));
  std::unique_ptr<StopVote> vote = comm ? comm->stop_vote() : std::make_unique<LocalStopVote>();
  RankCheckpoints checkpoints(job, rank, report.start_s);
  const RunProgress start = job.resume ? job.resume->progress : RunProgress{};
  if (job.resume) {
    optimizer->load_state(job.resume->optimizer);
    set_random_streams(model, job.resume->random.at(static_cast<size_t>(rank)));
    if (rank == 0 && start.epoch < o.epochs && job.resume->order != loader.epoch_order(start.epoch))
      fail("--resume ", job.resume->path, ": the data order of epoch ", start.epoch + 1,
           " differs from this run's (another data set, or another dpx version's shuffling)");
  }
  std::vector<StepRecord> mine;
  int64_t global_step = start.global_step;
  const int64_t total_updates = o.epochs * job.steps_per_epoch / o.accumulate;
  const bool guard = o.on_nonfinite != "ignore";
  std::optional<double> bad_loss;  // this rank's non-finite loss in the accumulation group
  int stopped_by = 0;
  for (int64_t epoch = start.epoch; epoch < o.epochs && !stopped_by; ++epoch) {
    model.train();
    const int64_t steps = job.steps_per_epoch, first = epoch == start.epoch ? start.step : 0;
    loader.start_epoch(epoch, first);
    double epoch_start = now_s(), loss_sum = epoch == start.epoch ? start.epoch_loss_sum : 0;
    for (int64_t step = first; step < steps; ++step, ++global_step) {
      if (comm) comm->set_activity(detail::concat("training: epoch ", epoch + 1, " step ", step + 1));
      PhaseTimer timer;
      double step_start = clock();
      StepRecord rec;
      rec.rank = rank;
      rec.epoch = epoch;
      rec.step = step;
      rec.global_step = global_step;
      rec.start_s = step_start;
      // Micro-step `step % accumulate`: communication and the optimizer run on the last one.
      bool final_micro = (step + 1) % o.accumulate == 0 || step + 1 == steps;
      std::optional<data::Batch> batch;
      {
        auto scope = timer.scope(Phase::load);
        batch = loader.next();
      }
      DPX_CHECK(batch.has_value(), "the data loader ran dry at step ", step, " of ", steps);
      Tensor images, labels, logits, loss;
      {
        auto scope = timer.scope(Phase::h2d);
        env->mark(Boundary::h2d_begin);
        images = env->upload(batch->images);
        labels = env->upload(batch->labels);
      }
      {
        auto scope = timer.scope(Phase::forward);
        env->mark(Boundary::forward_begin);
        logits = model.forward(ctx, images);
        loss = criterion.forward_tensor(ctx, logits, labels);  // read after the step: no sync here
      }
      {
        auto scope = timer.scope(Phase::backward);
        env->mark(Boundary::backward_begin);
        sync.begin_backward(final_micro);
        Tensor dlogits = criterion.backward(ctx);
        if (o.accumulate > 1) ops::scale(ctx, dlogits, 1.f / static_cast<float>(o.accumulate));
        if (guard && !std::isfinite(loss.item())) {
          // A non-finite loss with finite gradients (a class whose probability underflowed to
          // 0) would slip past the gradient check: make the gradients say it, on every rank, so
          // that all decide alike after the all-reduce.
          bad_loss = loss.item();
          ops::fill(ctx, dlogits, std::numeric_limits<float>::quiet_NaN());
        }
        model.backward(ctx, dlogits);
        env->mark(Boundary::backward_end);
      }
      rec.backward_end_s = clock();
      if (final_micro) {
        sync.finish(ctx, timer);
        auto scope = timer.scope(Phase::optimizer);
        env->mark(Boundary::optimizer_begin);
        if (!nonfinite_gradients(ctx, model, o, global_step, bad_loss, rank)) {
          optimizer->set_lr(o.lr_at(global_step / o.accumulate, total_updates));
          optimizer->step(ctx);
        }
        model.zero_grad(ctx);
        bad_loss.reset();
        env->mark(Boundary::optimizer_end);
      }
      rec.optimizer_step = final_micro;
      rec.times = timer.take();
      env->finish_step(rec.times);
      rec.loss = loss.item();
      rec.times[Phase::step] = clock() - step_start;
      rec.images = batch->images.size(0);
      rec.comm_bytes = sync.take_sent_bytes();
      loss_sum += rec.loss;
      mine.push_back(rec);
      if (rank == 0 && hooks.on_step) hooks.on_step(rec, step + 1 == steps);
      if (!final_micro) continue;
      // After every update: the ranks vote on a signal, and checkpoint when asked or due.
      const bool stop = vote->vote(stop::requested() != 0);
      // The epoch's last update is checkpointed at the epoch's end, after its evaluation.
      const bool due = checkpoints.due_after_update(global_step + 1) && step + 1 < steps;
      if (checkpoints.enabled() && (stop || due)) {
        save_checkpoint(checkpoints, comm, rank, model, *optimizer, {epoch, step + 1, global_step + 1, loss_sum, 0},
                        mine, report, report_mu, hooks, loader);
        sync.take_sent_bytes();  // the checkpoint's gathering is not gradient traffic
      }
      if (stop) {
        stopped_by = stop::requested() ? stop::requested() : SIGTERM;
        ++global_step;
        break;
      }
    }
    if (stopped_by) break;
    EpochRecord er;
    er.epoch = epoch;
    er.time_s = now_s() - epoch_start;
    er.train_loss = steps > 0 ? loss_sum / static_cast<double>(steps) : 0;
    // Evaluation is sequential on rank 0, as in the studies (docs/ARCHITECTURE.md, Studies);
    // the other ranks wait for it.
    if (rank == 0 && o.evaluate && job.test_set) {
      if (comm) comm->set_activity(detail::concat("evaluating the test set after epoch ", epoch + 1));
      double t = now_s();
      // Thread ranks: the evaluation may use every rank's threads, since the others wait. An
      // MPI process has its own cores only.
      const bool threads = ctx.device.is_cpu() && o.process_ranks == 0;
      Context eval_ctx = threads ? Context::cpu(job.threads_per_rank * job.ranks) : ctx;
      EvalResult ev = evaluate(eval_ctx, model, *job.test_set, std::max<int64_t>(job.rank_batch, 256));
      er.eval_s = now_s() - t;
      er.test_accuracy = ev.accuracy;
      er.test_loss = ev.loss;
    }
    if (comm) comm->barrier_patient(o.evaluate ? "rank 0 evaluates the test set" : "the end of the epoch");
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(report_mu);
      report.epochs.push_back(er);
      if (hooks.on_epoch) hooks.on_epoch(er);
    }
    if (checkpoints.enabled()) {  // every epoch's end, evaluation included
      save_checkpoint(checkpoints, comm, rank, model, *optimizer, {epoch + 1, 0, global_step, 0, 0}, mine, report,
                      report_mu, hooks, loader);
      sync.take_sent_bytes();
    }
  }
  std::lock_guard<std::mutex> lock(report_mu);
  report.steps.insert(report.steps.end(), mine.begin(), mine.end());
  if (rank == 0) {
    report.stopped_by = stopped_by;
    report.final_params = model.flat_params().to_vector();
    model.root().set_grad_ready_hook(nullptr);  // the hook points into this rank's GradSync
    report.final_model = std::make_shared<nn::Model>(std::move(model));
  }
}

}  // namespace

void run_spmd(const Job& job, TrainReport& report, const TrainHooks& hooks, Communicator* processes) {
  std::mutex report_mu;
  const TrainOptions& o = job.options;
  DdpOptions d;
  d.bucket_cap_bytes = static_cast<size_t>(o.bucket_mb * 1024 * 1024);
  d.overlap = o.overlap;
  d.algo = o.algo;
  if (processes) {
    if (o.ranks_per_node > 0) {
      std::vector<int> nodes;
      for (int r = 0; r < processes->size(); ++r) nodes.push_back(r / o.ranks_per_node);
      processes->set_node_layout(nodes);
    }
    const int rank = processes->rank();
    const auto& offsets = report.launch.clock_offset_s;
    const double offset = static_cast<size_t>(rank) < offsets.size() ? offsets[static_cast<size_t>(rank)] : 0.0;
    if (o.parallel == ParallelMode::none) {
      NoSync sync;
      rank_loop(job, rank, nullptr, sync, report, report_mu, hooks, offset);
    } else {
      DdpSync sync(*processes, d);
      rank_loop(job, rank, processes, sync, report, report_mu, hooks, offset);
    }
    if (processes->size() > 1) gather_steps(*processes, report.steps);
  } else if (o.parallel == ParallelMode::none) {
    NoSync sync;
    rank_loop(job, 0, nullptr, sync, report, report_mu, hooks, 0.0);
  } else {
    RankOptions ro;
    ro.pin_threads = o.pin_threads;
    ro.timeout_s = o.comm_timeout_s;
    ro.ranks_per_node = o.ranks_per_node;
    run_ranks(job.ranks, [&](Communicator& comm) {
      DdpSync sync(comm, d);
      rank_loop(job, comm.rank(), &comm, sync, report, report_mu, hooks, 0.0);
    }, ro);
  }
  std::stable_sort(report.steps.begin(), report.steps.end(), [](const StepRecord& a, const StepRecord& b) {
    return a.global_step != b.global_step ? a.global_step < b.global_step : a.rank < b.rank;
  });
}

void gather_steps(Communicator& comm, std::vector<StepRecord>& steps) {
  static_assert(std::is_trivially_copyable_v<StepRecord>, "step records travel as bytes");
  const auto* first = reinterpret_cast<const std::byte*>(steps.data());
  const auto all = gather_bytes(comm, std::vector<std::byte>(first, first + steps.size() * sizeof(StepRecord)));
  for (size_t q = 1; q < all.size(); ++q) {
    const size_t count = all[q].size() / sizeof(StepRecord);
    const size_t at = steps.size();
    steps.resize(at + count);
    std::memcpy(steps.data() + at, all[q].data(), count * sizeof(StepRecord));
  }
}

void fill_wait_times(TrainReport& report) {
  std::map<int64_t, double> latest;  // global step -> the slowest rank's end of backward
  for (const auto& r : report.steps)
    latest[r.global_step] = std::max(latest[r.global_step], r.backward_end_s);
  for (auto& r : report.steps)
    if (r.optimizer_step) r.times[Phase::wait] = latest[r.global_step] - r.backward_end_s;
}

}  // namespace dpx::parallel
