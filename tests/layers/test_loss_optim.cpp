// CrossEntropyLoss and SGD against hand-computed values (torch.nn.CrossEntropyLoss and
// torch.optim.SGD semantics), frozen parameters, a tiny MLP that learns a toy batch, and the
// update as --cuda-graph records it (SGD and AdamW).
#include <doctest/doctest.h>

#include "layers/layers.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

TEST_CASE("CrossEntropyLoss: mean loss, gradient and label smoothing as PyTorch") {
  Context ctx = Context::cpu();
  Tensor logits = Tensor::from({2, 3}, {1, 2, 3, 1, 0, -1});
  Tensor labels = labels_from({2, 0});
  nn::CrossEntropyLoss ce;
  // -log softmax: both rows lose log(1 + e^-1 + e^-2) = 0.40760596.
  CHECK(ce.forward(ctx, logits, labels) == doctest::Approx(0.40760596));
  // (softmax - onehot) / N
  std::vector<double> expected = {0.045015287, 0.122364236, -0.167379522, -0.167379522, 0.122364236, 0.045015287};
  auto g = ce.backward(ctx).to_vector();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(expected[i]));
  auto half = ce.backward(ctx, 0.5f).to_vector();  // a fresh tensor each time, scaled
  CHECK(half[0] == doctest::Approx(expected[0] / 2));

  nn::CrossEntropyLoss smooth(0.1f);
  CHECK(smooth.forward(ctx, logits, labels) == doctest::Approx(0.50760596));
  auto gs = smooth.backward(ctx).to_vector();
  CHECK(gs[0] == doctest::Approx(0.028348620));
  CHECK(gs[2] == doctest::Approx(-0.134046189));
  CHECK(nn::accuracy(ctx, logits, labels) == doctest::Approx(1.0));
  CHECK(nn::accuracy(ctx, logits, labels_from({0, 0})) == doctest::Approx(0.5));
}

TEST_CASE("CrossEntropyLoss: errors name the shapes") {
  Context ctx = Context::cpu();
  nn::CrossEntropyLoss ce;
  CHECK_THROWS_WITH_AS(ce.backward(ctx), doctest::Contains("before forward"), dpx::Error);
  CHECK_THROWS_WITH_AS(ce.forward(ctx, Tensor::zeros({4, 3}), labels_from({0, 1})),
                       doctest::Contains("logits (4, 3) and labels (2)"), dpx::Error);
  CHECK_THROWS_WITH_AS(ce.forward(ctx, Tensor::zeros({2, 3}), Tensor::zeros({2})), doctest::Contains("i64"),
                       dpx::Error);
  CHECK_THROWS_AS(nn::CrossEntropyLoss(1.5f), dpx::Error);
}

namespace {
// Linear(2, 1): flat parameters [w0, w1, b] = [1, -2, 0.5].
nn::Model line_model() {
  Rng rng(0);
  nn::Model m(std::make_unique<nn::Linear>(2, 1, rng));
  m.flat_params().copy_from(Tensor::from({3}, {1, -2, 0.5f}));
  return m;
}
const std::vector<std::vector<float>> kGrads = {{0.5f, 0.1f, -0.2f}, {-0.3f, 0.2f, 0.4f}, {0.1f, -0.4f, 0.f}};

// Three steps with kGrads written into the gradient buffer; the parameters after each.
std::vector<std::vector<float>> three_steps(nn::Model& m, const ops::SgdParams& p) {
  Context ctx = Context::cpu();
  nn::SGD sgd(m, p);
  std::vector<std::vector<float>> out;
  for (const auto& g : kGrads) {
    m.flat_grads().copy_from(Tensor::from({3}, g));
    sgd.step(ctx);
    out.push_back(m.flat_params().to_vector());
  }
  CHECK(sgd.steps() == 3);
  return out;
}

void check_close(const std::vector<std::vector<float>>& got, const std::vector<std::vector<double>>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t s = 0; s < got.size(); ++s)
    for (size_t i = 0; i < got[s].size(); ++i) {
      INFO("step " << s + 1 << ", parameter " << i);
      CHECK(got[s][i] == doctest::Approx(want[s][i]).epsilon(1e-6));
    }
}
}  // namespace

// Expected values: torch.optim.SGD's update rule run by hand in double precision:
//   d = g + wd p; buf = d (first step) or momentum buf + (1 - dampening) d;
//   d = nesterov ? d + momentum buf : buf; p -= lr d.
TEST_CASE("SGD: three steps with momentum and weight decay match torch.optim.SGD") {
  nn::Model m = line_model();
  check_close(three_steps(m, {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.f, .weight_decay = 0.01f}),
              {{0.949, -2.008, 0.5195},
               {0.932151, -2.033192, 0.4965305},
               {0.906054749, -2.01383161, 0.475361419}});
}

TEST_CASE("SGD: Nesterov, dampening (not applied on the first step) and plain SGD") {
  nn::Model a = line_model(), b = line_model(), c = line_model();
  check_close(three_steps(a, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true}),
              {{0.9031, -2.0152, 0.53705},
               {0.91707411, -2.05585112, 0.475824605},
               {0.882721158, -1.99634469, 0.456301028}});
  check_close(three_steps(b, {.lr = 0.05f, .momentum = 0.8f, .dampening = 0.5f, .weight_decay = 0.1f}),
              {{0.97, -1.995, 0.5075},
               {0.951075, -1.9910125, 0.50223125},
               {0.931057313, -1.97284497, 0.496760672}});
  nn::SGD plain(c, {.lr = 0.1f});
  CHECK_FALSE(plain.momentum_buffer().defined());  // no buffer without momentum, as torch
  check_close(three_steps(c, {.lr = 0.1f, .weight_decay = 0.01f}),
              {{0.949, -2.008, 0.5195},
               {0.978051, -2.025992, 0.4789805},
               {0.967072949, -1.98396601, 0.478501519}});
}

TEST_CASE("SGD: frozen parameters are left untouched, the others step as usual") {
  nn::Model m = line_model();
  m.slots()[1].param->requires_grad = false;  // the bias
  auto got = three_steps(m, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f});
  for (const auto& step : got) CHECK(step[2] == 0.5f);  // bitwise: never written
  check_close({{got[2][0], got[2][1]}}, {{0.906054749, -2.01383161}});

  Context ctx = Context::cpu();
  nn::Model n = line_model();
  n.slots()[0].param->requires_grad = false;
  nn::SGD sgd(n, {.lr = 0.1f, .momentum = 0.9f});
  n.flat_grads().copy_from(Tensor::from({3}, {1, 1, 1}));
  sgd.step(ctx);
  CHECK(n.flat_params().to_vector() == std::vector<float>{1, -2, 0.4f});
  CHECK(sgd.momentum_buffer().to_vector() == std::vector<float>{0, 0, 1});
}

TEST_CASE("SGD: learning rate and argument checks") {
  nn::Model m = line_model();
  nn::SGD sgd(m, {.lr = 0.1f});
  sgd.set_lr(0.02f);
  CHECK(sgd.lr() == 0.02f);
  CHECK_THROWS_WITH_AS(sgd.set_lr(-1.f), doctest::Contains("learning rate"), dpx::Error);
  CHECK_THROWS_WITH_AS(nn::SGD(m, {.lr = 0.1f, .momentum = 0.f, .nesterov = true}), doctest::Contains("Nesterov"),
                       dpx::Error);
  CHECK_THROWS_WITH_AS(nn::SGD(m, {.lr = 0.1f, .momentum = -0.5f}), doctest::Contains("momentum"), dpx::Error);
}

TEST_CASE("A tiny MLP trained 50 steps on a toy batch lowers its loss a lot") {
  check_toy_mlp_learns([](nn::Model& m) { return nn::SGD(m, {.lr = 0.1f, .momentum = 0.9f}); });
}

// The update as --cuda-graph records it (nn::Optimizer's recorded-update interface): stage() the
// step's scalars, record_step() reading them and skipping itself on a non-zero count,
// count_step() on the host. It must equal step() bit for bit while the learning rate changes
// each step; and it is recordable only once every parameter has started alike.
TEST_CASE("Optimizers: a recorded update equals step() bit for bit, and waits until every parameter has started") {
  Context ctx = Context::cpu();
  Tensor skip = Tensor::zeros({1}, DType::i64), go = Tensor::zeros({1}, DType::i64);
  skip.data<int64_t>()[0] = 1;
  // `at_first`: recordable before any update (AdamW: every parameter at step 0; SGD's momentum
  // buffers start with the first update).
  auto check_same = [&](nn::Optimizer& eager, nn::Model& a, nn::Optimizer& recorded, nn::Model& b, bool at_first) {
    for (size_t s = 0; s < kGrads.size(); ++s) {
      CAPTURE(s);
      a.flat_grads().copy_from(Tensor::from({3}, kGrads[s]));
      b.flat_grads().copy_from(Tensor::from({3}, kGrads[s]));
      eager.set_lr(0.1f / static_cast<float>(s + 1));
      eager.step(ctx);
      recorded.set_lr(0.1f / static_cast<float>(s + 1));
      if (s == 0) {  // the first update runs eagerly, as a shape's first step does
        CHECK(recorded.recordable() == at_first);
        recorded.step(ctx);
        CHECK(recorded.recordable());
        continue;
      }
      recorded.stage(ctx);
      const std::vector<float> before = b.flat_params().to_vector();
      recorded.record_step(ctx, &skip);  // a non-finite count: nothing moves
      CHECK(b.flat_params().to_vector() == before);
      recorded.record_step(ctx, &go);
      recorded.count_step();
      CHECK(a.flat_params().to_vector() == b.flat_params().to_vector());
    }
    CHECK(recorded.steps() == eager.steps());
    CHECK(recorded.state().at("steps").to_vector() == eager.state().at("steps").to_vector());
  };
  SUBCASE("SGD with momentum") {
    nn::Model a = line_model(), b = line_model();
    nn::SGD eager(a, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f}),
        recorded(b, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f});
    check_same(eager, a, recorded, b, false);
    CHECK(eager.momentum_buffer().to_vector() == recorded.momentum_buffer().to_vector());
  }
  SUBCASE("AdamW: its bias corrections come from the steps count_step counted") {
    nn::Model a = line_model(), b = line_model();
    nn::AdamW eager(a, {}), recorded(b, {});
    check_same(eager, a, recorded, b, true);
    CHECK(eager.exp_avg_sq().to_vector() == recorded.exp_avg_sq().to_vector());
    b.slots()[0].param->requires_grad = false;  // the bias steps on alone: its bias correction differs
    b.flat_grads().copy_from(Tensor::from({3}, kGrads[0]));
    recorded.step(ctx);
    b.slots()[0].param->requires_grad = true;
    CHECK_FALSE(recorded.recordable());
    CHECK_THROWS_WITH_AS(recorded.stage(ctx), doctest::Contains("every parameter at the same step"), dpx::Error);
  }
  SUBCASE("SGD without momentum starts nothing: recordable from the first step") {
    nn::Model b = line_model();
    nn::SGD plain(b, {.lr = 0.1f});
    CHECK(plain.recordable());
  }
}
