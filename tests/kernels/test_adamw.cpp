// Tests of the CPU AdamW step: closed forms (the first step, a constant gradient), a double-
// precision run of torch.optim.AdamW's update rule, golden values printed by PyTorch itself,
// thread-count invariance and torch's argument checks.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "kernels/ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;

namespace {

// The tensor and gradients of benchmarks/pytorch/adamw_golden.py (PARAM, GRADS).
const std::vector<float> kParam = {1.f, -2.f, 0.5f, 3.f, -0.25f, 0.f};
const std::vector<std::vector<float>> kGrads = {
    {0.5f, 1.f, -0.2f, 0.f, 4.f, 0.f},
    {-0.3f, 0.2f, 0.4f, 1e-3f, -4.f, 0.5f},
    {0.1f, -0.4f, 0.f, 2.f, 3.5f, -0.5f},
    {0.7f, 0.3f, -0.6f, -1e-4f, 0.f, 1.f},
    {-0.2f, 0.9f, 0.25f, 0.5f, -1.f, 0.f},
};

struct Run {
  std::vector<Tensor> params;  // after each step
  Tensor exp_avg, exp_avg_sq;  // after the last
};

Run run_adamw(const ops::AdamwParams& p) {
  Context ctx = Context::cpu();
  const Shape shape{static_cast<int64_t>(kParam.size())};
  Tensor param = Tensor::from(shape, kParam), m = Tensor::zeros(shape), v = Tensor::zeros(shape);
  Run run;
  for (size_t s = 0; s < kGrads.size(); ++s) {
    ops::adamw_step(ctx, param, Tensor::from(shape, kGrads[s]), m, v, p, static_cast<int64_t>(s) + 1, nullptr, nullptr);
    run.params.push_back(param.clone());
  }
  run.exp_avg = m;
  run.exp_avg_sq = v;
  return run;
}

// torch.optim.AdamW's update rule in double precision, written from its documentation.
std::vector<std::vector<double>> reference(const ops::AdamwParams& p) {
  const double lr = p.lr, b1 = p.beta1, b2 = p.beta2, eps = p.eps, wd = p.weight_decay;
  std::vector<double> w(kParam.begin(), kParam.end()), m(w.size(), 0.0), v(w.size(), 0.0);
  std::vector<std::vector<double>> after;
  for (size_t s = 0; s < kGrads.size(); ++s) {
    const double t = static_cast<double>(s + 1);
    for (size_t i = 0; i < w.size(); ++i) {
      const double g = kGrads[s][i];
      w[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(b1, t)), v_hat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
    after.push_back(w);
  }
  return after;
}

}  // namespace

TEST_CASE("adamw_step: the first step moves each parameter by lr * g / (|g| + eps), after decay") {
  // m = (1 - b1) g and v = (1 - b2) g^2, so the bias-corrected moments are g and g^2.
  ops::AdamwParams p{.lr = 0.1f, .beta1 = 0.8f, .beta2 = 0.9f, .eps = 1e-3f, .weight_decay = 0.5f};
  Run run = run_adamw(p);
  std::vector<double> want;
  for (size_t i = 0; i < kParam.size(); ++i) {
    const double g = kGrads[0][i];
    want.push_back(kParam[i] * (1 - 0.1 * 0.5) - 0.1 * g / (std::fabs(g) + 1e-3));
  }
  check_close(run.params[0], want, 1e-6);
}

TEST_CASE("adamw_step: a constant gradient gives the same bias-corrected step every time") {
  // With g fixed, m_t = (1 - b1^t) g and v_t = (1 - b2^t) g^2: the bias corrections cancel
  // exactly, so each step is p <- p (1 - lr wd) - lr g / (|g| + eps), whatever t is.
  Context ctx = Context::cpu();
  ops::AdamwParams p{.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
  const std::vector<float> g = {0.25f, -3.f, 1e-4f};
  Tensor param = Tensor::from({3}, {1.f, -1.f, 2.f}), grad = Tensor::from({3}, g);
  Tensor m = Tensor::zeros({3}), v = Tensor::zeros({3});
  std::vector<double> want = {1.0, -1.0, 2.0};
  for (int64_t t = 1; t <= 20; ++t) {
    CAPTURE(t);
    ops::adamw_step(ctx, param, grad, m, v, p, t, nullptr, nullptr);
    for (size_t i = 0; i < want.size(); ++i) want[i] = want[i] * (1 - 0.01 * 0.1) - 0.01 * g[i] / (std::fabs(g[i]) + 1e-8);
    check_close(param, want, 2e-6);
  }
}

TEST_CASE("adamw_step: five steps with weight decay follow torch.optim.AdamW's rule") {
  for (ops::AdamwParams p : {ops::AdamwParams{},
                             ops::AdamwParams{.lr = 0.1f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-3f,
                                              .weight_decay = 0.5f},
                             ops::AdamwParams{.lr = 0.05f, .beta1 = 0.f, .beta2 = 0.5f, .eps = 0.f,
                                              .weight_decay = 0.f}}) {
    CAPTURE(p.lr);
    Run run = run_adamw(p);
    auto want = reference(p);
    for (size_t s = 0; s < want.size(); ++s) {
      CAPTURE(s);
      check_close(run.params[s], want[s], 2e-6);
    }
  }
}

// Printed by `/usr/bin/python3 benchmarks/pytorch/adamw_golden.py` (torch 1.13, fp32,
// torch.optim.AdamW(foreach=False)): the parameters after each of the five steps, then the
// final moments.
TEST_CASE("adamw_step: golden values from PyTorch's torch.optim.AdamW") {
  SUBCASE("torch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2") {
    Run run = run_adamw(ops::AdamwParams{});
    const std::vector<std::vector<double>> want = {
        {0.998989999, -2.0009799, 0.50099498, 2.99996996, -0.250997484, 0},
        {0.998788476, -2.00176287, 0.500623882, 2.99919581, -0.250942349, -0.000744136807},
        {0.998524487, -2.00208712, 0.500335872, 2.99852657, -0.251241565, -0.000698947115},
        {0.997936189, -2.0024929, 0.500658572, 2.99797297, -0.251486212, -0.00115219073},
        {0.997565091, -2.00309396, 0.50074327, 2.99738121, -0.251609057, -0.00153527933},
    };
    for (size_t s = 0; s < want.size(); ++s) check_close(run.params[s], want[s], 1e-6);
    check_close(run.exp_avg, {0.0620349906, 0.16478999, -0.0129620042, 0.212063894, 0.154339999, 0.0859499946}, 1e-6);
    check_close(run.exp_avg_sq,
                {0.000878221821, 0.00209547649, 0.000621500774, 0.00424200529, 0.0451136567, 0.0014977511}, 1e-6);
  }
  SUBCASE("lr 0.1, betas (0.8, 0.95), eps 1e-3, weight_decay 0.5") {
    Run run = run_adamw({.lr = 0.1f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-3f, .weight_decay = 0.5f});
    const std::vector<std::vector<double>> want = {
        {0.85019958, -1.9999001, 0.574502468, 2.8499999, -0.337475002, 0},
        {0.794166386, -1.9777658, 0.504065156, 2.67512703, -0.309492916, -0.0773630589},
        {0.732536793, -1.90522802, 0.448337853, 2.47218275, -0.32459709, -0.0636051297},
        {0.634283602, -1.84786153, 0.465501159, 2.29505444, -0.332024783, -0.109972104},
        {0.568933308, -1.8196435, 0.451145411, 2.12302256, -0.32385543, -0.143903434},
    };
    for (size_t s = 0; s < want.size(); ++s) check_close(run.params[s], want[s], 1e-6);
    check_close(run.exp_avg, {0.095040001, 0.279199988, -0.0214239992, 0.356086433, 0.166080013, 0.147200003}, 1e-6);
    check_close(run.exp_avg_sq, {0.039765764, 0.0944350585, 0.0287130158, 0.193000033, 1.94028604, 0.0694984421},
                1e-6);
  }
}

TEST_CASE("adamw_step: bitwise the same result for any thread count") {
  const int64_t n = 100003;  // above the parallel threshold, and odd
  ops::AdamwParams p{.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.05f};
  auto run = [&](int threads) {
    Context ctx = Context::cpu(threads);
    Tensor param = dpx::testing::randn({n}, 1), m = Tensor::zeros({n}), v = Tensor::zeros({n});
    for (int64_t t = 1; t <= 3; ++t)
      ops::adamw_step(ctx, param, dpx::testing::randn({n}, 10 + t), m, v, p, t, nullptr, nullptr);
    return std::vector<Tensor>{param, m, v};
  };
  auto one = run(1);
  for (int threads : {2, 3, 4}) {
    CAPTURE(threads);
    auto many = run(threads);
    for (size_t k = 0; k < one.size(); ++k) CHECK(bitwise_equal(many[k], one[k]));
  }
}

TEST_CASE("adamw_step: torch's argument checks, the step count and sizes") {
  Context ctx = Context::cpu();
  Tensor param = Tensor::zeros({3}), grad = Tensor::zeros({3}), m = Tensor::zeros({3}), v = Tensor::zeros({3});
  struct Case { ops::AdamwParams p; const char* needle; };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Case& c : {Case{{.lr = -1e-3f}, "invalid learning rate -0.001"},
                        Case{{.lr = nan}, "invalid learning rate"},
                        Case{{.eps = -1e-8f}, "invalid epsilon"},
                        Case{{.beta1 = 1.f}, "invalid beta1 1 (must be in [0, 1))"},
                        Case{{.beta2 = -0.1f}, "invalid beta2 -0.1"},
                        Case{{.weight_decay = -0.01f}, "invalid weight_decay -0.01"}}) {
    CAPTURE(c.needle);
    CHECK_THROWS_WITH_AS(ops::adamw_step(ctx, param, grad, m, v, c.p, 1, nullptr, nullptr), doctest::Contains(c.needle),
                         Error);
    CHECK_THROWS_WITH_AS(ops::check_adamw_params(c.p, "AdamW"), doctest::Contains(c.needle), Error);
  }
  CHECK_NOTHROW(ops::check_adamw_params({.lr = 0.f, .beta1 = 0.f, .beta2 = 0.f, .eps = 0.f, .weight_decay = 0.f},
                                        "AdamW"));
  CHECK_THROWS_WITH_AS(ops::adamw_step(ctx, param, grad, m, v, {}, 0, nullptr, nullptr),
                       doctest::Contains("step 0 must be >= 1"), Error);
  Tensor small = Tensor::zeros({2});
  CHECK_THROWS_WITH_AS(ops::adamw_step(ctx, param, grad, small, v, {}, 1, nullptr, nullptr),
                       doctest::Contains("adamw_step: exp_avg (2) and param (3)"), Error);
  CHECK_THROWS_WITH_AS(ops::adamw_step(ctx, param, small, m, v, {}, 1, nullptr, nullptr),
                       doctest::Contains("adamw_step: param (3) and grad (2)"), Error);
  CHECK(param.to_vector() == std::vector<float>{0, 0, 0});  // nothing was written
}
