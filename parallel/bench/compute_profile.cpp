// Measuring what `dpx predict` needs of a model (see compute_profile.hpp): one replica's step
// phases, and when in backward each DDP bucket's gradients are ready.
#include "parallel/bench/compute_profile.hpp"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "layers/loss.hpp"
#include "layers/model.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "parallel/bench/metrics.hpp"
#include "parallel/train/trainer.hpp"
#include "zoo/registry.hpp"

namespace dpx::parallel {

namespace {

TrainOptions single_replica(const TrainOptions& base, int64_t batch) {
  TrainOptions o = base.measuring_run();
  o.dataset = "synthetic";
  o.devices = "cpu:1";
  o.parallel = ParallelMode::none;
  o.batch_size = batch;
  o.net_sim.clear();
  return o;
}

}  // namespace

StepProfile measure_step(const TrainOptions& base, int64_t batch, int steps, int warmup) {
  TrainOptions o = single_replica(base, batch);
  o.warmup_steps = warmup;
  o.max_steps = steps;  // as dpx train's --steps: the warm-up steps included
  o.synthetic_size = batch * o.max_steps;
  std::ostringstream quiet;  // the trainer's progress lines, not shown
  const TrainReport report = train(o, quiet);
  const Summary s = summarize(report);
  StepProfile p;
  p.batch = batch;
  p.mean_s = s.mean_s;
  p.measured_steps = s.measured_steps;
  return p;
}

std::vector<BucketReady> measure_bucket_readiness(const TrainOptions& base, int64_t batch) {
  const TrainOptions o = single_replica(base, batch);
  zoo::ModelOptions mo;
  mo.num_classes = o.num_classes;
  mo.in_channels = o.channels > 0 ? o.channels : 3;
  mo.image_size = o.image_size > 0 ? o.image_size : zoo::find_model(o.model).default_image_size;
  mo.head = o.head;
  mo.freeze_backbone = o.freeze_backbone;
  nn::Model model(zoo::build_model(o.model, mo));
  ReducerOptions ddp;
  ddp.bucket_cap_bytes = static_cast<size_t>(o.bucket_mb * (1 << 20));
  std::unordered_map<const nn::Parameter*, int> bucket_of;
  const std::vector<Bucket> buckets = plan_buckets(model, ddp, &bucket_of);
  std::vector<double> ready(buckets.size(), 0);
  double start = 0;
  model.root().set_grad_ready_hook([&](nn::Parameter& p) {
    const auto it = bucket_of.find(&p);
    if (it != bucket_of.end()) ready[static_cast<size_t>(it->second)] = now_s() - start;
  });
  Context ctx = Context::cpu(o.threads > 0 ? o.threads : available_cpus());
  model.train();
  Tensor x = Tensor::zeros({batch, mo.in_channels, mo.image_size, mo.image_size});
  Tensor labels = Tensor::zeros({batch}, DType::i64);
  nn::CrossEntropyLoss loss;
  double backward_s = 0;
  for (int pass = 0; pass < 2; ++pass) {  // the first warms caches and the allocator
    model.zero_grad(ctx);
    Tensor logits = model.forward(ctx, x);
    loss.forward(ctx, logits, labels);
    Tensor dy = loss.backward(ctx);
    std::fill(ready.begin(), ready.end(), 0.0);
    start = now_s();
    model.backward(ctx, dy);
    backward_s = now_s() - start;
  }
  model.root().set_grad_ready_hook(nullptr);
  std::vector<BucketReady> out;
  for (size_t i = 0; i < buckets.size(); ++i)
    out.push_back({buckets[i].numel * static_cast<int64_t>(dtype_size(model.flat_grads().dtype())), backward_s > 0 ? std::clamp(ready[i] / backward_s, 0.0, 1.0) : 1.0});
  return out;
}

}  // namespace dpx::parallel
