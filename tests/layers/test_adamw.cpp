// nn::AdamW over a Model's flat buffers: the same result as one ops::adamw_step over the whole
// buffer, frozen parameters neither read nor written, per-parameter step counts (as torch's
// state['step']), argument checks, and a tiny MLP that learns a toy batch.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "layers/layers.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

// Linear(3, 2) then Linear(2, 1): slots 0.weight (6), 0.bias (2), 1.weight (2), 1.bias (1).
nn::Model two_layers() {
  Rng rng(5);
  return nn::Model(std::make_unique<nn::Sequential>(std::make_unique<nn::Linear>(3, 2, rng),
                                                    std::make_unique<nn::Linear>(2, 1, rng)));
}

const ops::AdamwParams kParams{.lr = 0.05f, .beta1 = 0.8f, .beta2 = 0.9f, .eps = 1e-6f, .weight_decay = 0.1f};

Tensor grads_of_step(int64_t numel, int step) { return uniform({numel}, 100 + step); }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("AdamW: three steps equal one adamw_step over the whole flat buffer, bit for bit") {
  Context ctx = Context::cpu();
  nn::Model m = two_layers();
  REQUIRE(m.slots().size() == 4);
  const int64_t n = m.num_parameters();
  Tensor param = m.flat_params().clone(), exp_avg = Tensor::zeros({n}), exp_avg_sq = Tensor::zeros({n});
  nn::AdamW adamw(m, kParams);
  for (int step = 1; step <= 3; ++step) {
    m.flat_grads().copy_from(grads_of_step(n, step));
    adamw.step(ctx);
    ops::adamw_step(ctx, param, grads_of_step(n, step), exp_avg, exp_avg_sq, kParams, step, nullptr, nullptr);
  }
  CHECK(adamw.steps() == 3);
  CHECK(m.flat_params().to_vector() == param.to_vector());
  CHECK(adamw.exp_avg().to_vector() == exp_avg.to_vector());
  CHECK(adamw.exp_avg_sq().to_vector() == exp_avg_sq.to_vector());
}

TEST_CASE("AdamW: frozen parameters are neither read nor written; the others step as usual") {
  Context ctx = Context::cpu();
  nn::Model all = two_layers(), part = two_layers();
  part.slots()[1].param->requires_grad = false;  // 0.bias, elements 6..7
  part.slots()[3].param->requires_grad = false;  // 1.bias, element 10
  const int64_t n = all.num_parameters();
  const std::vector<float> initial = part.flat_params().to_vector();
  nn::AdamW a(all, kParams), b(part, kParams);
  for (int step = 1; step <= 3; ++step) {
    all.flat_grads().copy_from(grads_of_step(n, step));
    part.flat_grads().copy_from(grads_of_step(n, step));
    // A frozen parameter's gradient is never read: NaN there must not reach anything.
    for (int64_t i : {6, 7, 10}) part.flat_grads().data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
    a.step(ctx);
    b.step(ctx);
  }
  auto pa = all.flat_params().to_vector(), pb = part.flat_params().to_vector();
  auto ma = a.exp_avg().to_vector(), mb = b.exp_avg().to_vector();
  auto vb = b.exp_avg_sq().to_vector();
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(i);
    if (i == 6 || i == 7 || i == 10) {
      CHECK(same_bits(pb[i], initial[i]));
      CHECK(mb[i] == 0.f);
      CHECK(vb[i] == 0.f);
    } else {
      CHECK(same_bits(pb[i], pa[i]));
      CHECK(same_bits(mb[i], ma[i]));
    }
  }
}

TEST_CASE("AdamW: a parameter unfrozen later starts its own step count (bias correction)") {
  Context ctx = Context::cpu();
  nn::Model m = two_layers();
  const int64_t n = m.num_parameters();
  m.slots()[0].param->requires_grad = false;  // 0.weight, elements 0..5
  nn::AdamW adamw(m, kParams);
  for (int step = 1; step <= 2; ++step) {
    m.flat_grads().copy_from(grads_of_step(n, step));
    adamw.step(ctx);
  }
  m.slots()[0].param->requires_grad = true;
  const std::vector<float> before = m.flat_params().to_vector();
  Tensor g = grads_of_step(n, 3);
  m.flat_grads().copy_from(g);
  adamw.step(ctx);
  // Its first step: zero moments, step 1, so the update is lr * g / (|g| + eps) after decay.
  auto after = m.flat_params().to_vector();
  for (int64_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    const double gi = g.to_vector()[i];
    const double want = before[i] * (1 - 0.05 * 0.1) - 0.05 * gi / (std::fabs(gi) + 1e-6);
    CHECK(after[i] == doctest::Approx(want).epsilon(1e-6));
  }
  CHECK(adamw.steps() == 3);
}

TEST_CASE("AdamW: learning rate, the Optimizer interface and torch's argument checks") {
  nn::Model m = two_layers();
  std::unique_ptr<nn::Optimizer> opt = std::make_unique<nn::AdamW>(m, ops::AdamwParams{});
  CHECK(opt->lr() == 1e-3f);  // torch.optim.AdamW's default
  opt->set_lr(0.02f);
  CHECK(opt->lr() == 0.02f);
  CHECK_THROWS_WITH_AS(opt->set_lr(-1.f), doctest::Contains("AdamW: invalid learning rate -1"), dpx::Error);
  CHECK(opt->lr() == 0.02f);  // unchanged by the refused value
  CHECK(opt->steps() == 0);
  CHECK_THROWS_WITH_AS(nn::AdamW(m, {.beta1 = 1.f}), doctest::Contains("AdamW: invalid beta1"), dpx::Error);
  CHECK_THROWS_WITH_AS(nn::AdamW(m, {.beta2 = 1.5f}), doctest::Contains("AdamW: invalid beta2"), dpx::Error);
  CHECK_THROWS_WITH_AS(nn::AdamW(m, {.eps = -1.f}), doctest::Contains("AdamW: invalid epsilon"), dpx::Error);
  CHECK_THROWS_WITH_AS(nn::AdamW(m, {.weight_decay = -1.f}), doctest::Contains("AdamW: invalid weight_decay"),
                       dpx::Error);
}

TEST_CASE("A tiny MLP trained 50 steps with AdamW on a toy batch lowers its loss a lot") {
  check_toy_mlp_learns([](nn::Model& m) { return nn::AdamW(m, {.lr = 0.02f}); });
}
