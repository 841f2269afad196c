// One training step of one rank (see train_step.hpp); the epoch loop is in train_loop.cpp.
#include "parallel/train/train_step.hpp"

#include <cmath>
#include <cstdio>
#include <optional>

#include "core/capture.hpp"
#include "core/clock.hpp"
#include "kernels/ops.hpp"
#include "parallel/runtime/process_group.hpp"

namespace dpx::parallel {

namespace {

// The loss gradient, scaled by 1/k under --accumulate k and by the loss scale (--loss-scale),
// which update() takes off again after the reduction.
Tensor scaled_loss_gradient(Rank& r) {
  Context& ctx = r.env.ctx();
  Tensor dlogits = r.criterion.backward(ctx);
  const float factor = (r.scaler ? r.scaler->scale() : 1.f) / static_cast<float>(r.job.options.accumulate);
  if (factor != 1.f) ops::scale(ctx, dlogits, factor);
  return dlogits;
}

// With the divergence guard on, a non-finite loss with finite gradients (a class whose
// probability underflowed to 0) would slip past the gradient check: the loss gradient is made NaN
// before backward, on the device (no host read: a recorded step does the same), so that its
// gradients, and through the all-reduce every rank's, are NaN and all ranks decide alike.
void poison_on_bad_loss(Rank& r, const Tensor& loss, Tensor& dlogits) {
  if (r.job.options.on_nonfinite != NonFinite::ignore) ops::poison_if_nonfinite(r.env.ctx(), dlogits, loss);
}

// After backward: keeps a non-finite loss for the guard's message (and the loss scaler, which
// leaves such a step to the guard). Returns the value it read (nothing with the guard off), so
// that the step's record need not read the loss again (on a GPU each read waits for the device).
std::optional<float> note_bad_loss(Rank& r, const Tensor& loss) {
  if (r.job.options.on_nonfinite == NonFinite::ignore) return std::nullopt;
  const float value = loss.item();
  if (!std::isfinite(value)) r.bad_loss = value;
  return value;
}

// The divergence guard (--on-nonfinite) on the reduced gradients: every rank holds the same
// ones, so every rank decides alike. Returns true when the update must be skipped; throws a
// SharedFailure (stop) naming the step (1-based) and the first offending parameter.
bool nonfinite_gradients(Rank& r, int64_t global_step) {
  const TrainOptions& o = r.job.options;
  Context& ctx = r.env.ctx();
  nn::Model& model = r.model.master();
  if (o.on_nonfinite == NonFinite::ignore || ops::count_nonfinite(ctx, model.flat_grads()) == 0) return false;
  std::string first = "?";
  for (const nn::ParamSlot& slot : model.slots()) {
    if (!slot.param->requires_grad) continue;
    if (ops::count_nonfinite(ctx, model.flat_grads().view_at(slot.offset, {slot.numel})) > 0) {
      first = slot.name;
      break;
    }
  }
  const std::string loss = r.bad_loss ? detail::concat("loss (", *r.bad_loss, ") and ") : "";
  const char* where = o.ranks() == 1                    ? ")"
                      : o.parallel == ParallelMode::dp ? ", summed over the replicas)"
                                                       : ", after the all-reduce: every rank has them)";
  const std::string what =
      detail::concat("non-finite ", loss, "gradients at step ", global_step + 1, " (first in ", first, where);
  if (o.on_nonfinite == NonFinite::stop)
    throw SharedFailure(1, what + "; lower --lr, or pass --on-nonfinite skip to skip such steps");
  if (r.rank == 0) std::fprintf(stderr, "dpx: warning: %s: update skipped (--on-nonfinite skip)\n", what.c_str());
  return true;
}

// Divides the reduced gradients by the loss scale. A dynamic scaler then decides on a finite
// loss: inf or NaN gradients (an overflow, in backward or in an fp16 all-reduce) skip the update
// and lower the scale. Every rank holds the same reduced gradients, so every rank decides alike.
// A non-finite loss is left to the divergence guard: no scale would make it finite. Returns
// whether the scaler skips the update.
bool unscale(Rank& r) {
  if (!r.scaler) return false;
  Context& ctx = r.env.ctx();
  Tensor grads = r.model.master().flat_grads();
  ops::scale(ctx, grads, 1.f / r.scaler->scale());
  if (!r.scaler->dynamic() || r.bad_loss) return false;
  return !r.scaler->update(ops::count_nonfinite(ctx, grads) > 0);
}

// The learning rate of the update at the end of this accumulation group (--lr-schedule).
void set_lr(Rank& r, int64_t global_step) {
  const TrainOptions& o = r.job.options;
  const int64_t total_updates = o.epochs * r.job.steps_per_epoch / o.accumulate;
  r.optimizer.set_lr(o.lr_at(global_step / o.accumulate, total_updates));
}

// The optimizer's update at the end of an accumulation group, unless the loss scaler or the
// guard skips it.
void update(Rank& r, int64_t global_step, StepRecord& rec) {
  Context& ctx = r.env.ctx();
  rec.update_skipped = unscale(r) || nonfinite_gradients(r, global_step);
  if (!rec.update_skipped) {
    set_lr(r, global_step);
    r.optimizer.step(ctx);
  }
  r.model.master().zero_grad(ctx);
  r.bad_loss.reset();
}

// After a replay whose recorded update ran: the guard's decision from the count the replay made
// (the device skipped the update where it was not zero; nonfinite_gradients names the first
// offending parameter, or stops the run), then the update's bookkeeping on the host.
void updated_in_replay(Rank& r, int64_t global_step, StepRecord& rec, const GraphSteps::Shape& g) {
  const bool nonfinite = g.nonfinite.defined() && g.nonfinite.to(Device::cpu()).data<int64_t>()[0] != 0;
  rec.update_skipped = nonfinite && nonfinite_gradients(r, global_step);
  if (!rec.update_skipped) r.optimizer.count_step();
  r.model.master().zero_grad(r.env.ctx());
  r.bad_loss.reset();
}

// --cuda-graph: every step's random layers draw at the step count kept on the device
// (Context::random_offset), eager steps as recorded ones, and the count goes up after backward.
// A random layer's own count stands still in such a run (a recorded step's host code runs once,
// on a GPU), so step t draws fork(n)'s stream + t = fork(n + t)'s masks, n being the layer's
// count when the run began: the eager run's masks, step for step, whether the step was eager,
// recorded or replayed. The checkpoint adds the device count to the layers' (train_loop.cpp).
class RandomOffset {
 public:
  explicit RandomOffset(Rank& r) : ctx_(r.env.ctx()), count_(r.graphs ? &r.graphs->counter() : nullptr) {
    ctx_.random_offset = count_;
  }
  ~RandomOffset() { ctx_.random_offset = nullptr; }
  RandomOffset(const RandomOffset&) = delete;
  RandomOffset& operator=(const RandomOffset&) = delete;
  // After backward: the next step's count.
  void count_step() const {
    if (count_) ops::increment_i64(ctx_, *count_);
  }

 private:
  Context& ctx_;
  Tensor* count_;  // null: no --cuda-graph
};

// --cuda-graph (graph_step.hpp): forward, loss, backward, the gradients' exchange and, on a step
// that updates, the guard's count and the optimizer's update, of the shape's input tensors, as
// recorded work. The loss goes to g.loss, the exchange's calls to g.calls, the count to
// g.nonfinite; the loss scale is refused with the flag.
RecordedWork recordable_step(Rank& r, GraphSteps::Shape& g) {
  return [&r, &g](StepPhases& phases) {
    Context& ctx = r.env.ctx();
    const RandomOffset offset(r);
    {
      auto scope = phases.scope(Phase::forward);
      capture::Where where("forward");
      Tensor logits = r.model.forward(ctx, g.images, phases);
      g.loss = r.criterion.forward_tensor(ctx, logits, g.labels);
    }
    {
      auto scope = phases.scope(Phase::backward);
      capture::Where where("backward");
      Tensor dlogits = scaled_loss_gradient(r);
      poison_on_bad_loss(r, g.loss, dlogits);
      r.model.backward(ctx, dlogits, phases);  // DDP: starts the buckets' all-reduces
      offset.count_step();
    }
    {
      capture::Where where("the gradients' all-reduce");
      g.calls = r.grad_sync.record_finish(ctx, phases);
    }
    if (!g.update) return;
    auto scope = phases.scope(Phase::optimizer);
    capture::Where where("the update");
    if (g.nonfinite.defined()) ops::count_nonfinite_into(ctx, g.nonfinite, r.model.master().flat_grads());
    r.optimizer.record_step(ctx, g.nonfinite.defined() ? &g.nonfinite : nullptr);
  };
}

// The shape's entry for this step, its batch copied into the graph's inputs; null where the step
// runs eagerly (no --cuda-graph, the shape's first step, or an update the optimizer cannot record
// yet: Optimizer::recordable). `update`: the step ends its accumulation group (it all-reduces
// under DDP and updates the weights: such steps are recorded apart from the others).
GraphSteps::Shape* graph_inputs(Rank& r, const Tensor& images, const Tensor& labels, bool update) {
  if (!r.graphs) return nullptr;
  GraphSteps::Shape& g = r.graphs->step_of(images.shape(), update);
  if (g.steps == 1 || (!g.recorder && update && !r.optimizer.recordable())) return nullptr;
  Context& ctx = r.env.ctx();
  if (!g.images.defined()) {
    g.images = Tensor::empty(images.shape(), images.dtype(), ctx.device);
    g.labels = Tensor::empty(labels.shape(), labels.dtype(), ctx.device);
    if (update && r.job.options.on_nonfinite != NonFinite::ignore)
      g.nonfinite = Tensor::zeros({1}, DType::i64, ctx.device);
  }
  ops::copy(ctx, g.images, images);
  ops::copy(ctx, g.labels, labels);
  return &g;
}

// Records the shape's step (its second), then replays it.
void replay(Rank& r, GraphSteps::Shape& g, StepPhases& phases) {
  if (!g.recorder) {
    DPX_CHECK(!r.scaler, "--cuda-graph with a loss scale (refused by validate)");
    std::unique_ptr<StepRecorder> recorder = r.graphs->make_recorder();
    recorder->capture(recordable_step(r, g), phases);
    g.recorder = std::move(recorder);
    if (r.rank == 0) {
      const std::string nodes = g.recorder->nodes() ? detail::concat(g.recorder->nodes(), " nodes") : "rehearsed on the CPU";
      const bool ddp = r.job.options.parallel == ParallelMode::ddp;
      const char* what = !g.update ? "" : ddp ? " with its gradients' all-reduce and the update" : " with the update";
      std::fprintf(stderr, "dpx: --cuda-graph: recorded the step of a %s batch%s (%s)\n",
                   shape_str(g.images.shape()).c_str(), what, nodes.c_str());
    }
  }
  g.recorder->replay(phases);
  phases.replayed(Phase::forward);
  phases.replayed(Phase::backward);
  if (g.update) phases.replayed(Phase::optimizer);
}

}  // namespace

Rank::Rank(const Job& job, int rank, DeviceEnv& env, StepModel& model, GradSync& grad_sync, nn::Optimizer& optimizer,
           data::DataLoader& loader, double clock_offset_s)
    : job(job), rank(rank), env(env), model(model), grad_sync(grad_sync), optimizer(optimizer), loader(loader),
      clock_offset_s(clock_offset_s), criterion(job.options.label_smoothing) {
  if (const std::optional<LossScaleOptions> scaling = job.options.loss_scaling()) scaler.emplace(*scaling);
}

double Rank::clock() const { return now_s() - clock_offset_s; }

std::vector<StepRecord> train_step(Rank& r, const StepAt& at) {
  Context& ctx = r.env.ctx();
  StepPhases phases(r.env);
  StepRecord rec;
  rec.start_s = r.clock();
  rec.rank = r.rank;
  rec.epoch = at.epoch;
  rec.step = at.step;
  rec.global_step = at.global_step;
  // Micro-step `step % accumulate`: the gradients are all-reduced and applied on the last one.
  const int64_t steps = r.job.steps_per_epoch;
  rec.optimizer_step = (at.step + 1) % r.job.options.accumulate == 0 || at.step + 1 == steps;

  std::optional<data::Batch> batch;
  {
    auto scope = phases.scope(Phase::load);
    batch = r.loader.next();
  }
  DPX_CHECK(batch.has_value(), "the data loader ran dry at step ", at.step, " of ", steps);
  if (r.trace)  // the batch where a loader worker (or this thread) made it
    r.trace->push_back({TraceSpan::Kind::batch, r.rank, at.global_step, batch->worker,
                        batch->load_start_s - r.clock_offset_s, batch->load_end_s - batch->load_start_s, 0,
                        batch->images.size(0)});
  Tensor images, labels, loss;
  GraphSteps::Shape* graph = nullptr;
  {
    auto scope = phases.scope(Phase::h2d);
    images = r.env.upload(batch->images);
    labels = r.env.upload(batch->labels);
    graph = graph_inputs(r, images, labels, rec.optimizer_step);  // --cuda-graph: into the graph's inputs
  }
  if (graph) {
    r.grad_sync.begin_step(rec.optimizer_step);
    if (graph->update) {  // the recorded update's scalars for this step
      set_lr(r, at.global_step);
      r.optimizer.stage(ctx);
    }
    replay(r, *graph, phases);
    loss = graph->loss;
    rec.backward_end_s = r.clock();
    r.grad_sync.finish_replayed(graph->calls, phases);  // waits for the replay's all-reduces
  } else {
    const RandomOffset offset(r);
    {
      auto scope = phases.scope(Phase::forward);
      Tensor logits = r.model.forward(ctx, images, phases);
      loss = r.criterion.forward_tensor(ctx, logits, labels);  // read after the step: no sync here
    }
    {
      auto scope = phases.scope(Phase::backward);
      r.grad_sync.begin_step(rec.optimizer_step);
      if (r.scaler) rec.loss_scale = r.scaler->scale();
      Tensor dlogits = scaled_loss_gradient(r);
      poison_on_bad_loss(r, loss, dlogits);
      r.model.backward(ctx, dlogits, phases);  // DDP: buckets all-reduce as gradients become ready
      offset.count_step();
    }
    rec.backward_end_s = r.clock();
    r.grad_sync.finish(ctx, phases);  // waits for every bucket (DataParallel: sums the replicas' gradients)
  }
  const std::optional<float> loss_read = note_bad_loss(r, loss);
  if (graph && graph->update) {
    updated_in_replay(r, at.global_step, rec, *graph);
  } else if (rec.optimizer_step) {
    auto scope = phases.scope(Phase::optimizer);
    update(r, at.global_step, rec);
  }

  rec.times = phases.finish();
  rec.loss = loss_read ? *loss_read : loss.item();
  rec.times[Phase::step] = r.clock() - rec.start_s;
  rec.images = batch->images.size(0);
  rec.comm_bytes = r.grad_sync.take_sent_bytes();
  rec.memory = memory_peaks(ctx.device);
  return r.model.records(rec);
}

}  // namespace dpx::parallel
