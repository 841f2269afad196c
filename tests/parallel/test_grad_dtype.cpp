// Gradients all-reduced in bf16 or fp16 (--grad-dtype): each rank divides by the number of ranks
// before the sum, so that fp16's sum stays in range; the bytes sent halve; and DDP with 2 and 4
// thread ranks still reproduces one fp32 replica on the same global batch, within the rounding
// of the half type. And the loss scaler under DDP: every rank takes the same decisions.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "layers/linear.hpp"
#include "parallel/train/reducer.hpp"
#include "parallel/train/job.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "parallel/train/train_options.hpp"
#include "parallel/train/trainer.hpp"
#include "tests/common/compare.hpp"
#include "tests/parallel/small_job.hpp"

using namespace dpx;
using namespace dpx::parallel;
using dpx::testing::check_close;
using dpx::testing::initial_weights;
using dpx::testing::small_job;
using dpx::testing::update_rel_diff;

TEST_CASE("a half-precision all-reduce divides before the sum: 4 ranks of 30000 average to 30000 in fp16") {
  // Summed first, 4 x 30000 = 120000 is past fp16's largest finite value, 65504: inf.
  const int k = 4;
  const int64_t n = 1000;
  for (DType wire : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(wire));
    std::vector<std::vector<float>> got(k);
    std::vector<uint64_t> sent(k);
    run_ranks(k, [&](Communicator& comm) {
      Rng rng(1);
      nn::Model model(std::make_unique<nn::Linear>(25, 40, rng, false));  // n weights: one bucket
      REQUIRE(model.flat_grads().numel() == n);
      float* grads = model.flat_grads().data<float>();
      for (int64_t i = 0; i < n; ++i) grads[i] = 30000.f + static_cast<float>(comm.rank());
      Context ctx = Context::cpu(1);
      Reducer reducer(comm, model, {.algo = Algorithm::ring, .grad_dtype = wire}, ctx);
      DeviceEnv env;
      StepPhases phases(env);
      reducer.begin_step(true);
      reducer.finish(ctx, phases);  // every bucket starts here: no gradient reported ready
      (void)phases.finish();
      sent[comm.rank()] = reducer.take_sent_bytes();
      got[comm.rank()] = model.flat_grads().to_vector();
    });
    // The mean is 30001.5; fp16 holds multiples of 16 there and bf16 of 128: within half a step
    // per rounding (one narrowing and k - 1 sums), relative 2^-11 (fp16) or 2^-8 (bf16) each.
    const double unit = wire == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    for (int r = 0; r < k; ++r) {
      CAPTURE(r);
      check_close(got[r], std::vector<float>(n, 30001.5f), k * unit);
      CHECK(got[r] == got[0]);  // bitwise the same on every rank: they decide alike on inf/NaN
      // A ring sends 2 (k - 1) / k of the buffer: of 2-byte elements, half of what f32 would.
      CHECK(sent[r] == static_cast<uint64_t>(2 * (k - 1) * n / k * 2));
    }
  }
}

namespace {

TrainOptions ddp_job(const char* devices, const char* grad_dtype) {
  TrainOptions o = small_job(devices, ParallelMode::ddp);
  o.grad_dtype = parse_choice(kGradDtypes, grad_dtype, "--grad-dtype", "dtype");
  o.bucket_mb = 0.001;  // many buckets
  return o;
}

}  // namespace

// Each gradient is rounded to the half type once when narrowed and once per sum in the ring
// (k - 1), each time by at most u relative (2^-8 for bf16, 2^-11 for fp16): within k u. The
// weights' movement over 10 updates is a weighted mean of the gradients (momentum 0.9), so it
// would inherit the same relative error, were it not for the trajectory: the next gradients are
// taken at slightly other weights. A factor 2 for that: within 2 k u of one fp32 replica's
// movement (measured: 0.5 u at 2 ranks, bf16 and fp16; 3.9 u for bf16 and 0.6 u for fp16 at 4).
TEST_CASE("DDP with bf16 and fp16 gradient all-reduces reproduces one fp32 replica within the half type's rounding") {
  std::ostringstream log;
  const TrainOptions one = small_job("cpu:1", ParallelMode::none);
  const TrainReport single = train(one, log);
  const std::vector<float> w0 = initial_weights(one);
  const TrainReport full = train(ddp_job("cpu:2", "fp32"), log);
  for (const std::string devices : {"cpu:2", "cpu:4"}) {
    for (const std::string dtype : {"bf16", "fp16"}) {
      CAPTURE(devices);
      CAPTURE(dtype);
      TrainOptions o = ddp_job(devices.c_str(), dtype.c_str());
      o.loss_scale = {LossScale::Kind::none};  // the plain narrowing; the scaler has its own tests
      const TrainReport half = train(o, log);
      const double unit = dtype == "fp16" ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      const double diff = update_rel_diff(half.final_params(), single.final_params(), w0);
      MESSAGE(devices, " ", dtype, ": ", diff / unit, " u");
      CHECK(diff <= 2 * o.ranks() * unit);
      CHECK(diff > 0);  // not the fp32 result: the half type did round
      for (size_t i = 0; i < half.steps.size() && devices == "cpu:2"; ++i)
        CHECK(half.steps[i].comm_bytes * 2 == full.steps[i].comm_bytes);
    }
  }
}

TEST_CASE("with --accumulate 2 only the last micro-step's sum is narrowed: bf16 stays as close to one replica") {
  std::ostringstream log;
  TrainOptions one = small_job("cpu:1", ParallelMode::none);
  one.accumulate = 2;
  TrainOptions o = ddp_job("cpu:2", "bf16");
  o.accumulate = 2;
  const TrainReport single = train(one, log), half = train(o, log);
  const double unit = std::ldexp(1.0, -8);
  const double diff = update_rel_diff(half.final_params(), single.final_params(), initial_weights(one));
  MESSAGE("bf16 with --accumulate 2: ", diff / unit, " u");
  CHECK(diff <= 2 * 2 * unit);
  CHECK(diff > 0);
}

TEST_CASE("fp16 gradients with dynamic loss scaling from 2^20: overflowing updates are skipped on every rank alike") {
  std::ostringstream log;
  TrainOptions o = ddp_job("cpu:3", "fp16");
  o.batch_size = 30;
  o.loss_scale = {LossScale::Kind::dynamic};
  o.initial_loss_scale = std::ldexp(1.f, 20);
  o.loss_scale_window = 3;
  const TrainReport r = train(o, log);
  REQUIRE(r.steps.size() == 30);  // 3 ranks x 10 steps
  float scale = std::ldexp(1.f, 20);
  int skipped = 0, good_in_a_row = 0;
  for (int64_t step = 0; step < 10; ++step) {
    CAPTURE(step);
    const StepRecord& first = r.steps[static_cast<size_t>(step * 3)];
    for (int rank = 0; rank < 3; ++rank) {
      const StepRecord& s = r.steps[static_cast<size_t>(step * 3 + rank)];
      CHECK(s.global_step == step);
      CHECK(s.loss_scale == first.loss_scale);
      CHECK(s.update_skipped == first.update_skipped);
    }
    // The scaler's rules, replayed: the scale used, then its move.
    CHECK(first.loss_scale == scale);
    if (first.update_skipped) {
      ++skipped;
      scale /= 2;
      good_in_a_row = 0;
    } else if (++good_in_a_row == 3) {
      scale *= 2;
      good_in_a_row = 0;
    }
  }
  CHECK(r.steps.front().update_skipped);  // 2^20 times the largest gradients is past 65504
  CHECK(skipped >= 1);
  CHECK(skipped < 10);                    // and then it trained
  CHECK(r.steps.back().loss < r.steps.front().loss);
}

TEST_CASE("a constant loss scale is taken off before the optimizer: fp16 DDP with --loss-scale 1024 matches fp32") {
  std::ostringstream log;
  const TrainOptions one = small_job("cpu:1", ParallelMode::none);
  const TrainReport single = train(one, log);
  TrainOptions o = ddp_job("cpu:2", "fp16");
  o.loss_scale = parse_loss_scale("1024");
  const TrainReport scaled = train(o, log);
  for (const StepRecord& s : scaled.steps) {
    CHECK(s.loss_scale == 1024.f);
    CHECK_FALSE(s.update_skipped);
  }
  const double diff = update_rel_diff(scaled.final_params(), single.final_params(), initial_weights(one));
  MESSAGE("fp16 with --loss-scale 1024: ", diff / std::ldexp(1.0, -11), " u");
  CHECK(diff <= 2 * std::ldexp(1.0, -11));
}

TEST_CASE("DPX_HALF_MAPS: unset, empty or 1 keeps half-precision maps, 0 keeps fp32 maps, anything else is refused") {
  CHECK(half_maps_from_env(nullptr));
  CHECK(half_maps_from_env(""));
  CHECK(half_maps_from_env("1"));
  CHECK_FALSE(half_maps_from_env("0"));
  CHECK_THROWS_WITH_AS(half_maps_from_env("off"), doctest::Contains("DPX_HALF_MAPS='off': use 1 (the default"),
                       UsageError);
}
