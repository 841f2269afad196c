// No host allocation in steady state: after a few training steps every tensor a step makes
// (activations, gradients, kernels' scratch, the loader's batches) comes from the host block
// cache (core/tensor.hpp), so allocate_storage asks the system for no more memory.
#include <doctest/doctest.h>

#include <memory>

#include "core/tensor.hpp"
#include "parallel/train/device_env.hpp"
#include "parallel/train/job.hpp"
#include "parallel/train/train_step.hpp"

using namespace dpx;
using namespace dpx::parallel;

TEST_CASE("resnet18 training steps ask the system for no host memory after warming up") {
  if (host_cache_cap_bytes() == 0) {
    MESSAGE("the host block cache is off here (DPX_HOST_CACHE_MB=0, or AddressSanitizer): nothing to test");
    return;
  }
  TrainOptions o;
  o.model = "resnet18";
  o.dataset = "synthetic";
  o.image_size = 32;
  o.synthetic_size = 64;
  o.batch_size = 2;
  o.max_steps = 6;
  o.epochs = 1;
  o.devices = "cpu:1";
  o.parallel = ParallelMode::none;
  o.threads = 2;
  o.workers = 0;  // the loader on the stepping thread
  o.warmup_steps = 0;
  o.evaluate = false;
  o.log_interval_s = 1e9;
  Job job(o);
  std::unique_ptr<DeviceEnv> env = make_device_env(Device::cpu(), 2, false);
  nn::Model model = job.initial.clone(Device::cpu());
  NoSync sync;
  std::unique_ptr<nn::Optimizer> optimizer = job.make_optimizer(model);
  data::DataLoader loader(job.train_set, job.train_loader(0, 1, job.rank_batch));
  loader.start_epoch(0);
  LocalReplica replica(model);
  Rank r(job, 0, *env, replica, sync, *optimizer, loader);

  for (int64_t step = 0; step < 3; ++step) train_step(r, {0, step, step});  // warmup: the cache fills
  const uint64_t before = host_system_allocations();
  for (int64_t step = 3; step < 6; ++step) {
    const auto records = train_step(r, {0, step, step});
    REQUIRE(records.size() == 1);
    CHECK(records[0].optimizer_step);
  }
  CHECK(host_system_allocations() == before);
  CHECK(host_bytes_cached() > 0);
}
