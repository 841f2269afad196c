// DataParallel with torch.nn.DataParallel's semantics, in one process: a master scatters the
// global batch, copies its weights into the replicas every step, runs them in parallel
// (one thread each), gathers the outputs, computes the loss, scatters the output gradients,
// runs the replicas' backward in parallel and reduces their gradients into itself before its
// optimizer step. One deviation, documented in README.md: replica 0's batch-norm running
// statistics are copied back to the master (PyTorch drops every replica's buffer updates).
#include <algorithm>

#include "core/clock.hpp"
#include "core/stop.hpp"
#include "core/data/loader.hpp"
#include "kernels/ops.hpp"
#include "layers/loss.hpp"
#include "layers/optim.hpp"
#include "parallel/evaluate.hpp"
#include "parallel/primitives.hpp"
#include "parallel/run_modes.hpp"

namespace dpx::parallel {

namespace {
void copy_buffers(nn::Model& dst, nn::Model& src) {
  auto d = dst.root().named_buffers();
  auto s = src.root().named_buffers();
  for (size_t i = 0; i < d.size(); ++i) d[i].second->copy_from(*s[i].second);
}
}  // namespace

void run_data_parallel(const Job& job, TrainReport& report, const TrainHooks& hooks) {
  const TrainOptions& o = job.options;
  const int k = job.ranks;
  Context master_ctx = Context::cpu(job.threads_per_rank * k);
  nn::Model master = job.initial.clone(Device::cpu());
  std::vector<nn::Model> replicas = replicate(master, k);
  std::vector<Context> ctxs(static_cast<size_t>(k), Context::cpu(job.threads_per_rank));
  std::unique_ptr<nn::Optimizer> optimizer = job.make_optimizer(master);
  nn::CrossEntropyLoss criterion(o.label_smoothing);

  // The master loads the global batch.
  data::DataLoader loader(job.train_set, job.train_loader(0, 1, job.rank_batch * k));

  int64_t global_step = 0;
  const int64_t total_updates = o.epochs * job.steps_per_epoch / o.accumulate;
  std::vector<double> fwd(static_cast<size_t>(k)), bwd(static_cast<size_t>(k));
  for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
    master.train();
    for (auto& r : replicas) r.train();
    loader.start_epoch(epoch);
    double epoch_start = now_s(), loss_sum = 0;
    for (int64_t step = 0; step < job.steps_per_epoch; ++step, ++global_step) {
      PhaseTimer timer;
      double step_start = now_s();
      bool final_micro = (step + 1) % o.accumulate == 0 || step + 1 == job.steps_per_epoch;
      std::optional<data::Batch> batch;
      {
        auto scope = timer.scope(Phase::load);
        batch = loader.next();
      }
      DPX_CHECK(batch.has_value(), "the data loader ran dry at step ", step);
      std::vector<Tensor> inputs, outputs(static_cast<size_t>(k)), grads_out;
      {
        auto scope = timer.scope(Phase::comm_total);  // replicate + scatter
        broadcast_weights(master, replicas);
        inputs = scatter(batch->images, k);
      }
      double t = now_s();
      parallel_apply(k, [&](int i) {
        double s = now_s();
        outputs[i] = replicas[i].forward(ctxs[i], inputs[i]);
        fwd[i] = now_s() - s;
      });
      double parallel_fwd = now_s() - t;
      Tensor logits;
      {
        auto scope = timer.scope(Phase::comm_total);
        logits = gather(outputs);
      }
      double loss;
      {
        auto scope = timer.scope(Phase::forward);
        loss = criterion.forward(master_ctx, logits, batch->labels);
      }
      timer.add(Phase::forward, parallel_fwd);
      Tensor dlogits;
      {
        auto scope = timer.scope(Phase::backward);
        dlogits = criterion.backward(master_ctx);
        if (o.accumulate > 1) ops::scale(master_ctx, dlogits, 1.f / static_cast<float>(o.accumulate));
      }
      grads_out = scatter(dlogits, k);
      t = now_s();
      parallel_apply(k, [&](int i) {
        double s = now_s();
        replicas[i].zero_grad(ctxs[i]);
        replicas[i].backward(ctxs[i], grads_out[i]);
        bwd[i] = now_s() - s;
      });
      double parallel_bwd = now_s() - t;
      timer.add(Phase::backward, parallel_bwd);
      {
        auto scope = timer.scope(Phase::comm_total);
        reduce_gradients(master_ctx, master, replicas);
        copy_buffers(master, replicas[0]);
      }
      if (final_micro) {
        auto scope = timer.scope(Phase::optimizer);
        optimizer->set_lr(o.lr_at(global_step / o.accumulate, total_updates));
        optimizer->step(master_ctx);
        master.zero_grad(master_ctx);
      }
      // One process, one decision: a signal stops the run after this update.
      if (final_micro && stop::requested()) report.stopped_by = stop::requested();
      timer.add(Phase::step, now_s() - step_start);
      StepTimes common = timer.take();
      common[Phase::comm_exposed] = common[Phase::comm_total];  // nothing overlaps in DataParallel
      double max_f = *std::max_element(fwd.begin(), fwd.end());
      double max_b = *std::max_element(bwd.begin(), bwd.end());
      loss_sum += loss;
      for (int i = 0; i < k; ++i) {
        StepRecord r;
        r.rank = i;
        r.epoch = epoch;
        r.step = step;
        r.global_step = global_step;
        r.start_s = step_start;
        r.loss = loss;
        r.times = common;
        // A replica's own compute; the rest of the parallel regions it spent waiting.
        r.times[Phase::forward] = common[Phase::forward] - parallel_fwd + fwd[i];
        r.times[Phase::backward] = common[Phase::backward] - parallel_bwd + bwd[i];
        r.times[Phase::wait] = (max_f - fwd[i]) + (max_b - bwd[i]);
        r.images = inputs[i].size(0);
        r.optimizer_step = final_micro;
        report.steps.push_back(r);
        if (i == 0 && hooks.on_step) hooks.on_step(r, step + 1 == job.steps_per_epoch);
      }
      if (report.stopped_by) break;
    }
    if (report.stopped_by) break;
    EpochRecord er;
    er.epoch = epoch;
    er.time_s = now_s() - epoch_start;
    er.train_loss = job.steps_per_epoch > 0 ? loss_sum / static_cast<double>(job.steps_per_epoch) : 0;
    if (o.evaluate && job.test_set) {
      double t0 = now_s();
      EvalResult ev = evaluate(master_ctx, master, *job.test_set, std::max<int64_t>(job.rank_batch * k, 256));
      er.eval_s = now_s() - t0;
      er.test_accuracy = ev.accuracy;
      er.test_loss = ev.loss;
    }
    report.epochs.push_back(er);
    if (hooks.on_epoch) hooks.on_epoch(er);
  }
  report.final_params = master.flat_params().to_vector();
  report.final_model = std::make_shared<nn::Model>(std::move(master));
}

}  // namespace dpx::parallel
