// Transfer learning on the registered models: the heads that replace a classifier (linear,
// mlp4096; before a spatial classifier, pooling first), frozen backbones that a training step
// leaves bit-identical while the head learns, and the errors for what cannot be done.
#include <doctest/doctest.h>

#include <map>

#include "layers/layers.hpp"
#include "tests/zoo/zoo_test_util.hpp"
#include "zoo/cnn.hpp"
#include "zoo/heads.hpp"
#include "zoo/registry.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

std::map<std::string, Shape> shapes(nn::Module& m) {
  std::map<std::string, Shape> out;
  for (auto& [name, p] : m.named_parameters()) out[name] = p->value.shape();
  return out;
}

int64_t trainable(nn::Module& m) {
  int64_t n = 0;
  for (auto& [name, p] : m.named_parameters())
    if (p->requires_grad) n += p->value.numel();
  return n;
}

zoo::ModelOptions options(const std::string& head, bool freeze, int size = 32) {
  zoo::ModelOptions o;
  o.num_classes = 10;
  o.image_size = size;
  o.head = head;
  o.freeze_backbone = freeze;
  return o;
}

// Linear(f, 4096), Linear(4096, 4096), Linear(4096, 10), with biases.
int64_t mlp4096_params(int64_t features) { return features * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10; }

}  // namespace

TEST_CASE("--head linear and mlp4096 replace the classifier; --freeze-backbone leaves only it trainable") {
  Context ctx = Context::cpu(1);
  auto check = [&](const std::string& model, const std::string& head, int64_t features,
                   const std::map<std::string, Shape>& keys) {
    CAPTURE(model);
    CAPTURE(head);
    auto m = zoo::build_model(model, options(head, true));
    auto s = shapes(*m);
    for (const auto& [name, shape] : keys) {
      CAPTURE(name);
      REQUIRE(s.count(name) == 1);
      CHECK(s[name] == shape);
    }
    CHECK(trainable(*m) == (head == "linear" ? features * 10 + 10 : mlp4096_params(features)));
    const std::string prefix = zoo::find_model(model).classifier + ".";
    for (auto& [name, p] : m->named_parameters()) CHECK(p->requires_grad == name.starts_with(prefix));
    m->eval();
    CHECK(m->forward(ctx, Tensor::zeros({2, 3, 32, 32})).shape() == Shape{2, 10});
  };
  check("resnet18", "linear", 512, {{"fc.weight", {10, 512}}, {"fc.bias", {10}}});
  check("resnet18", "mlp4096", 512, {{"fc.0.weight", {4096, 512}}, {"fc.3.weight", {4096, 4096}}, {"fc.6.weight", {10, 4096}}});
  check("densenet121", "linear", 1024, {{"classifier.weight", {10, 1024}}});
  // SqueezeNet's classifier reads (N, 512, H, W) maps: a new head pools them first.
  check("squeezenet1_1", "linear", 512, {{"classifier.0.weight", {10, 512}}});
  check("squeezenet1_1", "mlp4096", 512, {{"classifier.0.weight", {4096, 512}}, {"classifier.6.bias", {10}}});
  check("efficientnet_b0", "linear", 1280, {{"classifier.weight", {10, 1280}}});

  // The parameter total: torchvision's less its fc, plus the new head.
  CHECK(count_parameters(*zoo::build_model("resnet18", options("mlp4096", false))) ==
        11'689'512 - 513'000 + mlp4096_params(512));
  // With the default head, freezing keeps torchvision's classifier (at 10 classes) trainable.
  auto frozen = zoo::build_model("resnet18", options("default", true));
  CHECK(trainable(*frozen) == 512 * 10 + 10);
}

TEST_CASE("a training step on a frozen backbone changes the head only; batch norm statistics still update") {
  Context ctx = Context::cpu(1);
  zoo::ModelOptions o = options("linear", true, 16);
  o.seed = 4;
  auto root = zoo::build_resnet({false, {1, 1, 1, 1}, 4}, o);
  zoo::apply_head(*root, zoo::find_model("resnet18"), o);
  nn::Model model(std::move(root));
  CHECK(model.num_trainable() == 32 * 10 + 10);
  auto before = model.state_dict();
  std::map<std::string, std::vector<float>> values;
  for (auto& [name, t] : before) values[name] = t.clone().to_vector();

  nn::SGD sgd(model, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true});
  nn::CrossEntropyLoss loss;
  Batch b = two_class_batch(4, 3, 16, 3);
  model.train();
  for (int step = 0; step < 2; ++step) {
    model.zero_grad(ctx);
    loss.forward(ctx, model.forward(ctx, b.x), b.labels);
    CHECK_FALSE(model.backward(ctx, loss.backward(ctx)).defined());
    for (const auto& s : model.slots())
      if (!s.param->requires_grad) CHECK_MESSAGE(s.param->grad.to_vector() == std::vector<float>(s.numel, 0.f), s.name);
    sgd.step(ctx);
  }
  for (auto& [name, t] : model.state_dict()) {
    CAPTURE(name);
    const bool same = t.to_vector() == values[name];
    if (name.starts_with("fc."))
      CHECK_FALSE(same);  // the head learns
    else if (name.find("running_") != std::string::npos || name.ends_with("num_batches_tracked"))
      CHECK_FALSE(same);  // as in PyTorch: train mode updates statistics of frozen batch norms
    else
      CHECK(same);  // every frozen parameter, bit for bit
  }
}

TEST_CASE("heads: unknown names and models without a declared classifier are usage errors") {
  CHECK_THROWS_WITH_AS(zoo::build_model("resnet18", options("big", false)),
                       "--head: unknown head 'big': use default, linear, mlp4096", UsageError);
  zoo::ModelInfo anonymous = zoo::find_model("mlp");
  anonymous.name = "anonymous";
  anonymous.classifier.clear();
  auto m = anonymous.build(options("default", false, 28));
  CHECK_THROWS_WITH_AS(zoo::apply_head(*m, anonymous, options("linear", false, 28)),
                       doctest::Contains("anonymous does not declare where its classifier is"), UsageError);
  CHECK_THROWS_AS(zoo::apply_head(*m, anonymous, options("default", true, 28)), UsageError);
  // mlp's classifier is its last Linear ("5").
  zoo::ModelOptions grey = options("linear", true, 28);
  grey.in_channels = 1;
  auto mlp = zoo::build_model("mlp", grey);
  CHECK(shapes(*mlp)["5.weight"] == Shape{10, 128});
  CHECK(trainable(*mlp) == 1290);
}
