// The trainer tests' job: the MLP on a small synthetic data set, 10 steps of a 32-image global
// batch over `devices` in `mode`, without evaluation or logging, on 2 threads.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "parallel/train/job.hpp"
#include "parallel/train/train_options.hpp"
#include "parallel/train/trainer.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/errors.hpp"

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

// efficientnet_b0, 4 steps of 4 images at 32x32 on `devices`: its dropout and stochastic depth
// draw new masks every step (the --cuda-graph tests: 1 eager, 1 recorded, 2 replayed steps).
inline parallel::TrainOptions random_layers_job(const std::string& devices) {
  parallel::TrainOptions o = small_job(devices, parallel::ParallelMode::none);
  o.model = "efficientnet_b0";
  o.channels = 3;
  o.image_size = 32;
  o.synthetic_size = 16;
  o.batch_size = 4;
  o.max_steps = 4;
  return o;
}

// The UsageError validate() gives a DDP job (batch 8) on `devices` over `backend` ("": none given)
// once `change` has been applied to it, or "" when it is accepted. With --backend nccl the
// algorithm is NCCL's, as dpx train makes it when --algo is not given.
inline std::string ddp_options_error(const std::string& devices, const std::string& backend,
                                     void (*change)(parallel::TrainOptions&)) {
  parallel::TrainOptions o;
  o.batch_size = 8;
  o.devices = devices;
  o.parallel = parallel::ParallelMode::ddp;
  if (!backend.empty()) o.backend = parse_choice(parallel::kBackends, backend, "--backend", "backend");
  if (o.backend == parallel::Backend::nccl) o.algo = parallel::Algorithm::nccl;
  change(o);
  return usage_error_of([&] { o.validate(); });
}

// How far a run's training moved the weights from where another's moved them, relative to how
// far they moved: ||(w - w0) - (w_ref - w0)|| / ||w_ref - w0|| (2-norms over every weight).
inline double update_rel_diff(const std::vector<float>& w, const std::vector<float>& w_ref,
                              const std::vector<float>& w0) {
  REQUIRE(w.size() == w0.size());
  REQUIRE(w_ref.size() == w0.size());
  double diff = 0, moved = 0;
  for (size_t i = 0; i < w0.size(); ++i) {
    diff += (double(w[i]) - w_ref[i]) * (double(w[i]) - w_ref[i]);
    moved += (double(w_ref[i]) - w0[i]) * (double(w_ref[i]) - w0[i]);
  }
  return std::sqrt(diff / moved);  // NaN or inf weights give NaN or inf: no tolerance passes them
}

// The weights a job starts from (every rank's, after DDP's broadcast).
inline std::vector<float> initial_weights(const parallel::TrainOptions& o) {
  return parallel::Job(o).initial.flat_params().to_vector();
}

// A data-parallel run trained as one replica did on the same global batch: the mean of the
// ranks' losses at every global step, and the final weights, within `tol` (weights near 0 within
// `floor`).
inline void check_matches_one_replica(const parallel::TrainReport& run, const parallel::TrainReport& single,
                                      double tol = 1e-4, double floor = 1e-3) {
  std::map<int64_t, std::pair<double, int>> losses;
  for (const auto& s : run.steps) {
    losses[s.global_step].first += s.loss;
    losses[s.global_step].second += 1;
  }
  std::vector<double> got, want;
  for (const auto& [step, v] : losses) got.push_back(v.first / v.second);
  for (const auto& s : single.steps) want.push_back(s.loss);
  REQUIRE(got.size() == want.size());
  check_close(got, want, tol);
  check_close(run.final_params(), single.final_params(), tol, floor);
}

}  // namespace dpx::testing
