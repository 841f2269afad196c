// Tests of the CPU SGD step: three steps of plain SGD, momentum with weight decay, Nesterov,
// and dampening, against values computed by hand from torch.optim.SGD's update rule; and both
// optimizer steps with their scalars and skip count read from tensors (a recorded step's way).
#include <doctest/doctest.h>

#include <cstring>

#include "core/capture.hpp"
#include "kernels/ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::check_close;

namespace {
// param starts at [1, -2]; the gradients of the three steps are fixed.
std::vector<std::vector<double>> run_sgd(const ops::SgdParams& p, int threads = 1) {
  Context ctx = Context::cpu(threads);
  Tensor param = Tensor::from({2}, {1, -2}), buf = Tensor::empty({2});
  const std::vector<Tensor> grads = {Tensor::from({2}, {0.5f, 1}),
                                     Tensor::from({2}, {-0.25f, 0.5f}),
                                     Tensor::from({2}, {1, -1.5f})};
  std::vector<std::vector<double>> after;
  for (size_t step = 0; step < grads.size(); ++step) {
    ops::sgd_step(ctx, param, grads[step], buf, p, step == 0, nullptr, nullptr);
    auto v = param.to_vector();
    after.emplace_back(v.begin(), v.end());
  }
  return after;
}
void check_steps(const std::vector<std::vector<double>>& got,
                 const std::vector<std::vector<double>>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t s = 0; s < want.size(); ++s)
    for (size_t i = 0; i < want[s].size(); ++i)
      CHECK(got[s][i] == doctest::Approx(want[s][i]).epsilon(1e-6));
}
}  // namespace

TEST_CASE("sgd_step: plain SGD, lr 0.1") {
  ops::SgdParams p;
  p.lr = 0.1f;
  check_steps(run_sgd(p), {{0.95, -2.1}, {0.975, -2.15}, {0.875, -2.0}});
}

TEST_CASE("sgd_step: momentum 0.9 with weight decay 0.01") {
  ops::SgdParams p;
  p.lr = 0.1f, p.momentum = 0.9f, p.weight_decay = 0.01f;
  // element 0: g1 = 0.5 + 0.01 = 0.51, buf = 0.51, p = 0.949;
  //            g2 = -0.25 + 0.00949 = -0.24051, buf = 0.459 - 0.24051 = 0.21849, p = 0.927151;
  //            g3 = 1 + 0.00927151, buf = 0.196641 + 1.00927151 = 1.20591251, p = 0.806559749
  check_steps(run_sgd(p), {{0.949, -2.098}, {0.927151, -2.234102}, {0.806559749, -2.204359698}});
}

TEST_CASE("sgd_step: Nesterov momentum 0.9 with weight decay 0.01") {
  ops::SgdParams p;
  p.lr = 0.1f, p.momentum = 0.9f, p.weight_decay = 0.01f, p.nesterov = true;
  // element 0: g1 = 0.51, buf = 0.51, step g = 0.51 + 0.459 = 0.969, p = 0.9031; ...
  check_steps(run_sgd(p),
              {{0.9031, -2.1862}, {0.90757411, -2.35642622}, {0.6981892082, -2.1771201882}});
}

TEST_CASE("sgd_step: dampening 0.5 applies from the second step on") {
  ops::SgdParams p;
  p.lr = 0.1f, p.momentum = 0.9f, p.dampening = 0.5f;
  // element 0: buf = 0.5 (undamped first step); buf = 0.45 - 0.125 = 0.325; buf = 0.2925 + 0.5
  check_steps(run_sgd(p), {{0.95, -2.1}, {0.9175, -2.215}, {0.83825, -2.2435}});
}

TEST_CASE("sgd_step: Nesterov needs momentum and no dampening, sizes must match") {
  Context ctx = Context::cpu();
  Tensor param = Tensor::zeros({3}), grad = Tensor::zeros({3}), buf = Tensor::zeros({3});
  ops::SgdParams p;
  p.nesterov = true;
  CHECK_THROWS_WITH_AS(ops::sgd_step(ctx, param, grad, buf, p, true, nullptr, nullptr),
                       doctest::Contains("Nesterov momentum requires a momentum"), Error);
  Tensor small = Tensor::zeros({2});
  CHECK_THROWS_WITH_AS(ops::sgd_step(ctx, param, small, buf, ops::SgdParams{}, true, nullptr, nullptr),
                       doctest::Contains("sgd_step: param (3) and grad (2)"), Error);
}

// A step recorded into a CUDA graph takes its learning rate (AdamW: all its scalars) from a tensor
// on the device and skips itself when a count of non-finite gradients is not zero (ops.def); the
// CPU and reference kernels must give the eager step's results bit for bit, and write nothing
// when skipped. Inside a capture an update without its scalars on the device is refused.
TEST_CASE("optimizer steps: scalars and the skip count read from tensors, as a recorded step does") {
  const int64_t n = 1031;
  const Tensor w0 = dpx::testing::randn({n}, 1), g = dpx::testing::randn({n}, 2);
  Tensor skip = Tensor::zeros({1}, DType::i64), dont = Tensor::zeros({1}, DType::i64);
  skip.data<int64_t>()[0] = 3;
  for (const bool reference : {false, true}) {
    CAPTURE(reference);
    Context ctx = Context::cpu(2);
    ctx.reference = reference;
    SUBCASE("sgd_step") {
      ops::SgdParams p;
      p.lr = 0.05f, p.momentum = 0.9f, p.weight_decay = 1e-4f, p.nesterov = true;
      Tensor a = w0.clone(), b = w0.clone(), ma = Tensor::zeros({n}), mb = Tensor::zeros({n});
      Tensor lr = Tensor::from({1}, {0.05f});
      ops::SgdParams stale = p;
      stale.lr = 7.f;  // ignored: the tensor holds the learning rate
      for (int step = 0; step < 3; ++step) {
        ops::sgd_step(ctx, a, g, ma, p, step == 0, nullptr, nullptr);
        ops::sgd_step(ctx, b, g, mb, stale, step == 0, &lr, &dont);
      }
      CHECK(dpx::testing::bitwise_equal(a, b));
      CHECK(dpx::testing::bitwise_equal(ma, mb));
      ops::sgd_step(ctx, b, g, mb, p, false, &lr, &skip);  // skipped: nothing written
      CHECK(dpx::testing::bitwise_equal(a, b));
      CHECK(dpx::testing::bitwise_equal(ma, mb));
      Tensor two = Tensor::from({2}, {0.05f, 0.f});
      CHECK_THROWS_WITH_AS(ops::sgd_step(ctx, b, g, mb, p, false, &two, nullptr),
                           doctest::Contains("sgd_step: scalars (2) must hold exactly one element"), Error);
      Tensor f32_skip = Tensor::zeros({1});
      CHECK_THROWS_WITH_AS(ops::sgd_step(ctx, b, g, mb, p, false, &lr, &f32_skip), doctest::Contains("skip"), Error);
      capture::Scope scope("--cuda-graph");
      CHECK_THROWS_WITH_AS(ops::sgd_step(ctx, b, g, mb, p, false, nullptr, nullptr),
                           doctest::Contains("sgd_step's learning rate comes from the host"), capture::CaptureError);
      ops::sgd_step(ctx, b, g, mb, p, false, &lr, &dont);  // with its scalars it may be recorded
    }
    SUBCASE("adamw_step") {
      ops::AdamwParams p;
      p.weight_decay = 0.05f;
      Tensor a = w0.clone(), b = w0.clone();
      Tensor ma = Tensor::zeros({n}), va = Tensor::zeros({n}), mb = Tensor::zeros({n}), vb = Tensor::zeros({n});
      Tensor scalars = Tensor::empty({ops::kAdamwScalars});
      for (int64_t step = 1; step <= 3; ++step) {
        const ops::AdamwScalars s = ops::adamw_scalars(p, step);
        std::memcpy(scalars.data<float>(), &s, sizeof s);
        ops::adamw_step(ctx, a, g, ma, va, p, step, nullptr, nullptr);
        ops::adamw_step(ctx, b, g, mb, vb, ops::AdamwParams{}, 1, &scalars, &dont);  // p, step ignored
      }
      CHECK(dpx::testing::bitwise_equal(a, b));
      CHECK(dpx::testing::bitwise_equal(ma, mb));
      CHECK(dpx::testing::bitwise_equal(va, vb));
      ops::adamw_step(ctx, b, g, mb, vb, p, 4, &scalars, &skip);
      CHECK(dpx::testing::bitwise_equal(a, b));
      CHECK(dpx::testing::bitwise_equal(ma, mb));
      CHECK(dpx::testing::bitwise_equal(va, vb));
      CHECK_THROWS_WITH_AS(ops::adamw_step(ctx, b, g, mb, vb, p, 4, &skip, nullptr),
                           doctest::Contains("adamw_step: scalars"), Error);
      capture::Scope scope("--cuda-graph");
      CHECK_THROWS_AS(ops::adamw_step(ctx, b, g, mb, vb, p, 4, nullptr, nullptr), capture::CaptureError);
    }
  }
}
