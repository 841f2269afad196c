// A "vanilla" DataParallel written by hand from dpx's four primitives (replicate, scatter,
// parallel_apply, gather), as the measurement studies did with PyTorch's (docs/ARCHITECTURE.md,
// Studies), timed against dpx's native DataParallel on the same model, data and batch. Usage:
//   vanilla_data_parallel [replicas=2] [steps=30] [batch=64] [model=lenet5]
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/clock.hpp"
#include "core/data/datasets.hpp"
#include "core/data/loader.hpp"
#include "kernels/ops.hpp"
#include "layers/layers.hpp"
#include "parallel/bench/metrics.hpp"
#include "parallel/train/primitives.hpp"
#include "parallel/train/trainer.hpp"
#include "zoo/registry.hpp"

using namespace dpx;

int main(int argc, char** argv) try {
  int k = argc > 1 ? std::atoi(argv[1]) : 2;
  int steps = argc > 2 ? std::atoi(argv[2]) : 30;
  int64_t batch = argc > 3 ? std::atoll(argv[3]) : 64;
  std::string model_name = argc > 4 ? argv[4] : "lenet5";
  if (k < 1 || steps < 2 || batch < k) {
    std::fprintf(stderr, "usage: vanilla_data_parallel [replicas>=1] [steps>=2] [batch>=replicas] [model]\n");
    return 2;
  }
  data::DatasetSpec spec;
  spec.name = "synthetic";
  auto dataset = data::make_dataset(spec, data::Split::train);
  zoo::ModelOptions mo;
  mo.in_channels = 1;
  mo.image_size = 28;
  nn::Model master(zoo::build_model(model_name, mo));
  Context ctx = Context::cpu(k);
  nn::SGD sgd(master, {.lr = 0.01f, .momentum = 0.9f});
  nn::CrossEntropyLoss criterion;
  data::DataLoader loader(dataset, {.batch_size = batch, .num_workers = 1});
  loader.start_epoch(0);

  // ---- the vanilla DataParallel step: a dozen lines of primitives ----
  std::vector<nn::Model> replicas = parallel::replicate(master, k);
  std::vector<Context> ctxs(static_cast<size_t>(k), Context::cpu(1));
  double total = 0;
  for (int s = 0; s < steps; ++s) {
    auto b = loader.next();
    double t = now_s();
    parallel::broadcast_weights(master, replicas);                    // replicate
    auto inputs = parallel::scatter(b->images, k);                    // scatter
    std::vector<Tensor> outputs(static_cast<size_t>(k));
    parallel::parallel_apply(k, [&](int i) { outputs[i] = replicas[i].forward(ctxs[i], inputs[i]); });
    Tensor logits = parallel::gather(outputs);                        // gather
    float loss = criterion.forward(ctx, logits, b->labels);
    auto grads = parallel::scatter(criterion.backward(ctx), k);
    parallel::parallel_apply(k, [&](int i) {
      replicas[i].zero_grad(ctxs[i]);
      replicas[i].backward(ctxs[i], grads[i]);
    });
    parallel::reduce_gradients(ctx, master, replicas);                // reduce
    sgd.step(ctx);
    master.zero_grad(ctx);
    if (s > 0) total += now_s() - t;  // the first step is warm-up
    if (s % 10 == 0) std::printf("vanilla step %d loss %.4f\n", s, loss);
  }
  double vanilla_ms = total / (steps - 1) * 1e3;

  // ---- dpx's native DataParallel on the same configuration ----
  parallel::TrainOptions o;
  o.model = model_name;
  o.dataset = "synthetic";
  o.devices = "cpu:" + std::to_string(k);
  o.parallel = parallel::ParallelMode::dp;
  o.batch_size = batch;
  o.lr = 0.01f;  // the same optimiser as the vanilla loop above
  o.nesterov = false;
  o.lr_schedule = parallel::LrSchedule::constant;
  o.max_steps = steps;
  o.warmup_steps = 1;
  o.threads = k;
  o.evaluate = false;
  std::ostringstream quiet;
  parallel::Summary s = parallel::summarize(parallel::train(o, quiet));
  double native_ms = s.mean_s[static_cast<int>(Phase::step)] * 1e3 - s.mean_s[static_cast<int>(Phase::load)] * 1e3;
  std::printf("%s, batch %lld, %d replicas: vanilla DataParallel %.2f ms/step, native %.2f ms/step "
              "(both without data loading)\n",
              model_name.c_str(), static_cast<long long>(batch), k, vanilla_ms, native_ms);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "vanilla_data_parallel: error: %s\n", e.what());
  return 1;
}
