// Model over layers: one flat parameter buffer with state_dict names, independent clones,
// the gradient-ready hook (once per trainable parameter, when its gradient is final) and the
// train/eval switch; a model without gradients (a job's initial model) holds its weights once.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "layers/layers.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {
// conv (1 -> 2, 3x3) + BN + ReLU + flatten + linear: on (N, 1, 4, 4) input, logits (N, 3).
std::unique_ptr<nn::Sequential> tiny_net(uint64_t seed) {
  Rng rng(seed);
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(1, 2, 3, rng);
  net->emplace<nn::BatchNorm2d>(2);
  net->emplace<nn::ReLU>();
  net->emplace<nn::Flatten>();
  net->emplace<nn::Linear>(8, 3, rng);
  return net;
}
}  // namespace

TEST_CASE("Model: every parameter is a view into one flat buffer, named as state_dict") {
  auto net = tiny_net(1);
  const std::vector<float> conv_w = net->child<nn::Conv2d>(0).weight().value.to_vector();
  nn::Model model(std::move(net));

  std::vector<std::string> names;
  for (const auto& s : model.slots()) names.push_back(s.name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias"});
  std::set<std::string> keys;
  for (auto& [k, v] : model.state_dict()) keys.insert(k);
  CHECK(keys == std::set<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                      "1.running_var", "1.num_batches_tracked", "4.weight", "4.bias"});

  int64_t offset = 0;
  for (const auto& s : model.slots()) {
    CHECK(s.offset == offset);
    CHECK(s.param->value.storage() == model.flat_params().storage());
    CHECK(s.param->grad.storage() == model.flat_grads().storage());
    CHECK(s.param->value.offset_bytes() == static_cast<size_t>(offset) * sizeof(float));
    offset += s.numel;
  }
  CHECK(offset == model.num_parameters());
  CHECK(model.num_parameters() == 18 + 2 + 2 + 2 + 24 + 3);
  // Initial values survive the move into the buffer.
  CHECK(model.state_dict().at("0.weight").to_vector() == conv_w);

  // Backward accumulates into the flat gradient buffer; zero_grad clears it.
  Context ctx = Context::cpu();
  Tensor x = uniform({2, 1, 4, 4}, 2);
  Tensor y = model.forward(ctx, x);
  model.backward(ctx, uniform(y.shape(), 3));
  auto g1 = model.flat_grads().to_vector();
  for (const auto& s : model.slots()) {
    bool any = false;
    for (int64_t i = s.offset; i < s.offset + s.numel; ++i) any = any || g1[i] != 0.f;
    CHECK_MESSAGE(any, s.name);
  }
  model.forward(ctx, x);
  model.backward(ctx, uniform(y.shape(), 3));
  auto g2 = model.flat_grads().to_vector();
  for (size_t i = 0; i < g1.size(); ++i) CHECK(g2[i] == doctest::Approx(2 * g1[i]));
  model.zero_grad(ctx);
  CHECK(model.flat_grads().to_vector() == std::vector<float>(g1.size(), 0.f));
}

TEST_CASE("Model: clone is a deep, independent copy") {
  Context ctx = Context::cpu();
  nn::Model model(tiny_net(4));
  nn::Model copy = model.clone(Device::cpu());
  auto original = model.flat_params().to_vector();
  CHECK(copy.flat_params().to_vector() == original);
  CHECK(copy.flat_params().storage() != model.flat_params().storage());

  ops::fill(ctx, copy.flat_params(), 0.5f);
  copy.root().named_buffers()[0].second->copy_from(Tensor::from({2}, {7, 7}));
  CHECK(model.flat_params().to_vector() == original);
  CHECK(model.state_dict().at("1.running_mean").to_vector() == std::vector<float>{0, 0});
  // A training forward on the copy moves its running statistics, not the original's.
  copy.forward(ctx, uniform({2, 1, 4, 4}, 5));
  CHECK(model.state_dict().at("1.num_batches_tracked").data<int64_t>()[0] == 0);
  CHECK(copy.state_dict().at("1.num_batches_tracked").data<int64_t>()[0] == 1);
  // Gradients too: backward on the copy leaves the original's at zero.
  copy.backward(ctx, uniform({2, 3}, 6));
  CHECK(model.flat_grads().to_vector() == std::vector<float>(model.num_parameters(), 0.f));

  model.copy_state_from(copy);
  CHECK(model.flat_params().to_vector() == copy.flat_params().to_vector());
  CHECK(model.state_dict().at("1.num_batches_tracked").data<int64_t>()[0] == 1);
}

TEST_CASE("Model: grad_ready fires once per trainable parameter, when its gradient is final") {
  Context ctx = Context::cpu();
  nn::Model model(tiny_net(7));
  auto state = model.state_dict();
  nn::Parameter* frozen = model.slots()[1].param;  // "0.bias"
  frozen->requires_grad = false;

  std::map<const nn::Parameter*, int> calls;
  std::map<const nn::Parameter*, std::vector<float>> at_hook;
  std::vector<const nn::Parameter*> order;
  model.root().set_grad_ready_hook([&](nn::Parameter& p) {
    ++calls[&p];
    at_hook[&p] = p.grad.to_vector();
    order.push_back(&p);
  });
  Tensor x = uniform({2, 1, 4, 4}, 8);
  Tensor y = model.forward(ctx, x);
  model.backward(ctx, uniform(y.shape(), 9));

  for (const auto& s : model.slots()) {
    if (!s.param->requires_grad) {
      CHECK(calls.count(s.param) == 0);
      continue;
    }
    CHECK_MESSAGE(calls[s.param] == 1, s.name);
    CHECK_MESSAGE(at_hook[s.param] == s.param->grad.to_vector(), s.name);  // final when announced
  }
  // Backward runs from the last layer: the classifier announces first, the first conv last.
  REQUIRE(order.size() == 5);
  CHECK(order.front() == model.slots()[4].param);
  CHECK(order.back() == model.slots()[0].param);
  // A frozen parameter's gradient is never written.
  CHECK(frozen->grad.to_vector() == std::vector<float>{0, 0});

  // Once per backward: a second pass announces every parameter again.
  model.forward(ctx, x);
  model.backward(ctx, uniform(y.shape(), 9));
  for (const auto& s : model.slots())
    if (s.param->requires_grad) CHECK(calls[s.param] == 2);
}

TEST_CASE("Model: train and eval reach every module, and eval forwards leave running stats alone") {
  Context ctx = Context::cpu();
  Rng rng(10);
  auto net = tiny_net(10);
  net->emplace<nn::Dropout>(0.5f, rng);
  nn::Model model(std::move(net));
  for (auto& [name, m] : model.root().named_modules()) CHECK(m->training());
  model.eval();
  for (auto& [name, m] : model.root().named_modules()) CHECK_FALSE(m->training());
  Tensor x = uniform({3, 1, 4, 4}, 11);
  Tensor y1 = model.forward(ctx, x), y2 = model.forward(ctx, x);
  CHECK(y1.to_vector() == y2.to_vector());  // no dropout, fixed statistics
  CHECK(model.state_dict().at("1.running_var").to_vector() == std::vector<float>{1, 1});
  // Backward still works in eval mode (frozen feature extractors). A Model computes no dx for
  // its input unless asked to.
  model.root().set_input_grad_needed(true);
  Tensor dx = model.backward(ctx, uniform(y1.shape(), 12));
  CHECK(dx.shape() == x.shape());
  model.train();
  for (auto& [name, m] : model.root().named_modules()) CHECK(m->training());
  model.forward(ctx, x);
  CHECK(model.state_dict().at("1.running_var").to_vector() != std::vector<float>{1, 1});
  CHECK(model.forward(ctx, x).to_vector() != model.forward(ctx, x).to_vector());  // dropout masks
}

TEST_CASE("Model: building from a seed is deterministic") {
  nn::Model a(tiny_net(42)), b(tiny_net(42)), c(tiny_net(43));
  CHECK(a.flat_params().to_vector() == b.flat_params().to_vector());
  CHECK(a.flat_params().to_vector() != c.flat_params().to_vector());
}

TEST_CASE("Model without gradients: a model only copied from holds its weights once, and its clones train") {
  // The live host bytes a model adds: the flat parameters, and with gradients their size again.
  auto added = [](bool with_grads) {
    auto net = tiny_net(3);
    const size_t before = host_bytes_in_use();
    nn::Model m(std::move(net), Device::cpu(), with_grads);
    return std::pair{host_bytes_in_use() - before, m.num_parameters()};
  };
  const auto [with, params] = added(true);
  const auto [without, params2] = added(false);
  CHECK(params == params2);
  CHECK(with - without == static_cast<size_t>(params) * sizeof(float));  // the gradient buffer saved

  nn::Model initial(tiny_net(3), Device::cpu(), /*with_grads=*/false);
  CHECK(initial.flat_grads().numel() == 0);
  for (const auto& s : initial.slots()) CHECK(!s.param->grad.defined());
  Context ctx = Context::cpu(1);
  initial.zero_grad(ctx);  // nothing to clear, and no failure
  // Its clone has its own gradients, as a rank's replica needs.
  nn::Model replica = initial.clone(Device::cpu());
  CHECK(replica.flat_grads().numel() == replica.num_parameters());
  for (const auto& s : replica.slots()) CHECK(s.param->grad.defined());
}

TEST_CASE("Model::clone holds at most twice the weights at once: its gradient buffer comes after the copies are gone") {
  Rng rng(5);
  nn::Model source(std::make_unique<nn::Sequential>(std::make_unique<nn::Linear>(1000, 1000, rng)), Device::cpu(),
                   /*with_grads=*/false);
  const size_t weights = static_cast<size_t>(source.num_parameters()) * sizeof(float);
  reset_window_peaks();
  const size_t before = host_bytes_in_use();
  nn::Model replica = source.clone(Device::cpu());
  // The module's copies of its parameters and the flat buffer they move into; then the flat
  // buffer and the gradients. (Before: copies, flat buffer and gradients at once, 3 x.)
  CHECK(window_peak_bytes(Device::cpu()) - before == 2 * weights);
  CHECK(host_bytes_in_use() - before == 2 * weights);
  CHECK(replica.flat_params().to_vector() == source.flat_params().to_vector());
}
