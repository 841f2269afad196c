// What `dpx predict` needs to know of a model on this machine: the phases of one training step
// of a single replica at a given per-rank batch (measured by the trainer `dpx bench` runs), and
// the DDP bucket plan with the moment in backward at which each bucket's gradients are ready
// (measured with the gradient-ready hook DDP itself uses), from which analysis/predict.hpp
// computes how much of the all-reduce backward can hide.
#pragma once
#include <array>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/phase_timer.hpp"
#include "parallel/train/reducer.hpp"
#include "parallel/train/train_options.hpp"

namespace dpx::parallel {

struct StepProfile {
  int64_t batch = 0;                         // per replica
  std::array<double, kPhaseCount> mean_s{};  // one replica's mean per phase (Phase order)
  int64_t measured_steps = 0;
};

struct BucketReady {
  int64_t bytes = 0;           // the bucket's gradient bytes
  double ready_fraction = 0;   // when its last gradient is ready, as a fraction of backward (0..1]
};

// Runs `base` (model, image size, threads, optimizer...) as one replica on synthetic data of
// batch `batch` for `steps` steps, the first `warmup` of them left out of the means (as dpx
// train's --steps and --warmup), and returns the mean phases. Progress goes nowhere.
StepProfile measure_step(const TrainOptions& base, int64_t batch, int steps, int warmup = 1);

// The buckets DDP would make for `base`'s model (--bucket-mb) and when each is ready in one
// backward at `batch` (the second of two, after a warm-up), in DDP's order (the first ready first).
std::vector<BucketReady> measure_bucket_readiness(const TrainOptions& base, int64_t batch);

}  // namespace dpx::parallel
