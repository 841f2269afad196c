// The trainer tests' job: the MLP on a small synthetic data set, 10 steps of a 32-image global
// batch over `devices` in `mode`, without evaluation or logging, on 2 threads.
#pragma once
#include <string>

#include "parallel/train_options.hpp"

namespace dpx::testing {

inline parallel::TrainOptions small_job(const std::string& devices, parallel::ParallelMode mode) {
  parallel::TrainOptions o;
  o.model = "mlp";
  o.dataset = "synthetic";
  o.image_size = 8;
  o.channels = 1;
  o.synthetic_size = 512;
  o.batch_size = 32;
  o.max_steps = 10;
  o.epochs = 1;
  o.lr = 0.05f;
  o.momentum = 0.9f;
  o.weight_decay = 1e-4f;
  o.seed = 7;
  o.devices = devices;
  o.parallel = mode;
  o.threads = 2;
  o.workers = 1;
  o.warmup_steps = 0;
  o.evaluate = false;
  o.log_interval_s = 1e9;
  return o;
}

}  // namespace dpx::testing
