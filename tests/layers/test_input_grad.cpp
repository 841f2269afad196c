// Backward without an input gradient (Module::set_input_grad_needed): Conv2d and Linear skip
// dx, Sequential stops at its first trainable child, a Model asks nothing of its first layer;
// backward with dx added into the caller's tensor (Module::backward_add); Sequential::replace;
// and the FLOPs Conv2d and Linear count for `dpx models`.
#include <doctest/doctest.h>

#include "layers/layers.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

// The identity, counting its backward calls: shows which children a backward reached.
class CountingIdentity : public nn::Cloneable<CountingIdentity> {
 public:
  Tensor forward(Context&, const Tensor& x) override { return x; }
  Tensor backward(Context& ctx, const Tensor& dy) override {
    ++calls;
    Tensor dx = Tensor::empty(dy.shape());
    ops::copy(ctx, dx, dy);
    return dx;
  }
  std::string type_name() const override { return "CountingIdentity"; }
  int calls = 0;
};

std::vector<float> all_grads(nn::Module& m) {
  std::vector<float> g;
  for (auto& [name, p] : m.named_parameters())
    if (p->grad.defined()) {
      auto v = p->grad.to_vector();
      g.insert(g.end(), v.begin(), v.end());
    }
  return g;
}

}  // namespace

TEST_CASE("Conv2d and Linear without a caller for dx: the same weight gradients, dx undefined") {
  Context ctx = Context::cpu(1);
  Rng rng(1);
  nn::Conv2d conv(3, 4, 3, rng, 2, 1);
  nn::Linear fc(6, 5, rng);
  auto run = [&](nn::Module& proto, const Tensor& x, bool need) {
    auto m = proto.clone();
    Tensor y = m->forward(ctx, x);
    m->set_input_grad_needed(need);
    Tensor dx = m->backward(ctx, uniform(y.shape(), 9));
    CHECK(dx.defined() == need);
    if (need) CHECK(dx.shape() == x.shape());
    return all_grads(*m);
  };
  Tensor xc = uniform({2, 3, 5, 5}, 2), xl = uniform({2, 3, 6}, 3);
  CHECK(run(conv, xc, true) == run(conv, xc, false));
  CHECK(run(fc, xl, true) == run(fc, xl, false));
}

TEST_CASE("backward_add: dx added into the caller's tensor, by the op where it can add (Conv2d, LayerNorm)") {
  Context ctx = Context::cpu(1);
  Rng rng(4);
  nn::Conv2d conv(3, 4, 3, rng, 2, 1);
  nn::LayerNorm norm(6);
  nn::ReLU relu;  // Module's own: backward, then an axpy
  struct Case {
    nn::Module* proto;
    Tensor x;
    const char* op;  // the op that must add dx itself
  };
  for (const Case& c : {Case{&conv, uniform({2, 3, 5, 5}, 5), "conv2d_backward"},
                        Case{&norm, uniform({2, 3, 6}, 6), "layer_norm_backward"},
                        Case{&relu, uniform({2, 3, 6}, 7), nullptr}}) {
    CAPTURE(c.proto->describe());
    auto a = c.proto->clone(), b = c.proto->clone();
    const Tensor y = a->forward(ctx, c.x);
    b->forward(ctx, c.x);
    const Tensor dy = uniform(y.shape(), 8), before = uniform(c.x.shape(), 9);
    Tensor into = before.clone();
    const auto calls = op_calls([&] { a->backward_add(ctx, dy, into); });
    CHECK(calls.count("axpy") == (c.op ? 0u : 1u));
    if (c.op) CHECK(calls.at(c.op) == 1);
    Tensor want = Tensor::empty(c.x.shape());
    ops::add(ctx, want, b->backward(ctx, dy), before);
    check_close(into.to_vector(), want.to_vector(), 1e-6);
    CHECK(all_grads(*a) == all_grads(*b));
    if (!c.op) continue;
    Tensor wrong = uniform({2, 3, 5, 6}, 10);
    const std::string what = c.proto->describe() + ": backward_add given f32 (2, 3, 5, 6) to add dx into, expected f32 " +
                             shape_str(c.x.shape());
    auto again = c.proto->clone();
    again->forward(ctx, c.x);
    CHECK_THROWS_WITH_AS(again->backward_add(ctx, dy, wrong), what.c_str(), Error);
  }
}

TEST_CASE("Sequential without a caller for dx stops at its first trainable child") {
  Context ctx = Context::cpu(1);
  Rng rng(2);
  nn::Sequential s;
  auto& spy = s.emplace<CountingIdentity>();
  auto& frozen = s.emplace<nn::Conv2d>(2, 2, 3, rng, 1, 1);
  s.emplace<nn::ReLU>();
  auto& spy_mid = s.emplace<CountingIdentity>();
  auto& trainable = s.emplace<nn::Conv2d>(2, 3, 1, rng);
  s.emplace<nn::Flatten>();
  for (auto* p : {&frozen.weight(), frozen.bias()}) p->requires_grad = false;
  Tensor x = uniform({2, 2, 4, 4}, 4);

  Tensor y = s.forward(ctx, x);
  Tensor dy = uniform(y.shape(), 5);
  CHECK(s.backward(ctx, dy).shape() == x.shape());  // a new Sequential's caller wants dx
  CHECK(spy.calls == 1);
  const auto with_dx = trainable.weight().grad.to_vector();

  trainable.weight().grad = Tensor();
  trainable.bias()->grad = Tensor();
  s.forward(ctx, x);
  s.set_input_grad_needed(false);
  CHECK_FALSE(s.backward(ctx, dy).defined());
  CHECK(spy.calls == 1);      // before the first trainable child: not reached
  CHECK(spy_mid.calls == 1);  // a parameter-free layer in front of it: not reached either
  CHECK(trainable.weight().grad.to_vector() == with_dx);
  CHECK_FALSE(frozen.weight().grad.defined());

  // Nothing trainable at all: no child runs backward.
  trainable.weight().requires_grad = false;
  trainable.bias()->requires_grad = false;
  s.forward(ctx, x);
  CHECK_FALSE(s.backward(ctx, dy).defined());
  CHECK(spy.calls == 1);
  CHECK(spy_mid.calls == 1);
  CHECK_FALSE(s.has_trainable_parameters());
}

TEST_CASE("a Model's backward skips its first layer's dx; gradients stay those of a full backward") {
  Context ctx = Context::cpu(1);
  auto make = [&] {
    Rng r(3);
    auto s = std::make_unique<nn::Sequential>();
    s->emplace<nn::Conv2d>(1, 2, 3, r, 1, 1);
    s->emplace<nn::ReLU>();
    s->emplace<nn::Flatten>();
    s->emplace<nn::Linear>(2 * 4 * 4, 3, r);
    return s;
  };
  nn::Model model(make());
  CHECK_FALSE(model.root().input_grad_needed());
  auto reference = make();
  Tensor x = uniform({2, 1, 4, 4}, 6);
  Tensor dy = uniform({2, 3}, 7);
  model.zero_grad(ctx);
  model.forward(ctx, x);
  CHECK_FALSE(model.backward(ctx, dy).defined());
  reference->forward(ctx, x);
  CHECK(reference->backward(ctx, dy).shape() == x.shape());
  CHECK(model.flat_grads().to_vector() == all_grads(*reference));
  // A clone is a new module: its caller wants dx until a Model says otherwise.
  CHECK(model.root().clone()->input_grad_needed());
  CHECK_FALSE(model.clone(Device::cpu()).root().input_grad_needed());
}

TEST_CASE("Sequential::replace swaps a child in place and hands the old one back") {
  Rng rng(4);
  nn::Sequential s;
  s.add("features", std::make_unique<nn::ReLU>());
  s.add("fc", std::make_unique<nn::Linear>(4, 2, rng));
  s.eval();
  auto old = s.replace("fc", std::make_unique<nn::Linear>(4, 7, rng));
  CHECK(old->type_name() == "Linear");
  CHECK(s.child_name(1) == "fc");
  CHECK(s.child<nn::Linear>(1).out_features() == 7);
  CHECK_FALSE(s.child(1).training());  // the newcomer takes the parent's mode
  CHECK_THROWS_WITH_AS(s.replace("head", std::make_unique<nn::ReLU>()),
                       "replace_module: Sequential has no child named \"head\"", Error);
}

TEST_CASE("Conv2d and Linear count 2 FLOPs per multiply-add of their last forward") {
  Context ctx = Context::cpu(1);
  Rng rng(5);
  nn::Conv2d conv(4, 6, {.kernel_h = 3, .kernel_w = 1, .stride_h = 2, .pad_h = 1, .groups = 2}, rng);
  CHECK(conv.last_forward_flops() == 0);
  conv.forward(ctx, Tensor::zeros({2, 4, 7, 5}));  // output (2, 6, 4, 5), 2 x 3 x 1 taps per output
  CHECK(conv.last_forward_flops() == 2 * (2 * 6 * 4 * 5) * (2 * 3 * 1));
  nn::Linear fc(5, 3, rng);
  fc.forward(ctx, Tensor::zeros({2, 4, 5}));  // 8 rows
  CHECK(fc.last_forward_flops() == 2 * 8 * 5 * 3);
  nn::ReLU relu;
  relu.forward(ctx, Tensor::zeros({3}));
  CHECK(relu.last_forward_flops() == 0);
}
