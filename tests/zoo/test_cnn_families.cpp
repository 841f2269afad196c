// ResNet, VGG, AlexNet, DenseNet and SqueezeNet against torchvision 0.14: exact parameter counts,
// every state_dict key and shape, FLOPs, forward shapes, initialisation per family, the exact
// minimum input sizes, and that a small variant of each family learns.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "layers/layers.hpp"
#include "tests/zoo/torchvision_cnn_reference.hpp"
#include "tests/zoo/zoo_test_util.hpp"
#include "zoo/cnn.hpp"
#include "zoo/model_stats.hpp"
#include "zoo/registry.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

std::map<std::string, nn::Parameter*> params_of(nn::Module& m) {
  std::map<std::string, nn::Parameter*> out;
  for (auto& [name, p] : m.named_parameters()) out[name] = p;
  return out;
}

// N(0, stddev): mean near 0 and the spread within 3 % (thousands of samples at least).
void check_normal(const Tensor& t, double stddev, const std::string& what) {
  CAPTURE(what);
  Moments m = moments(t);
  CHECK(std::abs(m.mean) < 0.05 * stddev);
  CHECK(m.stddev() == doctest::Approx(stddev).epsilon(0.03));
}
// U(-b, b): inside, both ends nearly reached, and the spread of a uniform, b / sqrt 3.
void check_uniform(const Tensor& t, double bound, const std::string& what) {
  CAPTURE(what);
  Moments m = moments(t);
  CHECK(m.min >= -bound);
  CHECK(m.max <= bound);
  CHECK(m.min < -0.95 * bound);
  CHECK(m.max > 0.95 * bound);
  CHECK(m.stddev() == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.03));
}
void check_constant(const Tensor& t, float value, const std::string& what) {
  CAPTURE(what);
  Moments m = moments(t);
  CHECK(m.min == value);
  CHECK(m.max == value);
}

// Per family, what torchvision's constructors draw (checked on the models built at 1000 classes).
void check_initialisation(const std::string& name, nn::Module& m) {
  auto p = params_of(m);
  if (name == "resnet18") {  // conv: kaiming_normal(fan_out); BN 1, 0; fc: PyTorch's default
    check_normal(p["conv1.weight"]->value, std::sqrt(2.0 / (64 * 49)), "conv1.weight");
    check_normal(p["layer4.1.conv2.weight"]->value, std::sqrt(2.0 / (512 * 9)), "layer4.1.conv2.weight");
    check_constant(p["layer2.0.bn1.weight"]->value, 1.f, "bn weight");
    check_constant(p["layer2.0.downsample.1.bias"]->value, 0.f, "bn bias");
    check_uniform(p["fc.weight"]->value, 1 / std::sqrt(512.0), "fc.weight");
  } else if (name == "vgg11") {  // conv: kaiming_normal(fan_out), bias 0; Linear: N(0, 0.01), bias 0
    check_normal(p["features.0.weight"]->value, std::sqrt(2.0 / (64 * 9)), "features.0.weight");
    check_constant(p["features.18.bias"]->value, 0.f, "conv bias");
    check_normal(p["classifier.3.weight"]->value, 0.01, "classifier.3.weight");
    check_constant(p["classifier.0.bias"]->value, 0.f, "linear bias");
  } else if (name == "alexnet") {  // PyTorch's defaults: U(+-1/sqrt(fan_in)) for weights and biases
    check_uniform(p["features.3.weight"]->value, 1 / std::sqrt(64.0 * 25), "features.3.weight");
    check_uniform(p["features.3.bias"]->value, 1 / std::sqrt(64.0 * 25), "features.3.bias");
    check_uniform(p["classifier.4.weight"]->value, 1 / std::sqrt(4096.0), "classifier.4.weight");
  } else if (name == "densenet121") {  // conv: kaiming_normal(fan_in); Linear bias 0
    check_normal(p["features.conv0.weight"]->value, std::sqrt(2.0 / (3 * 49)), "features.conv0.weight");
    check_normal(p["features.denseblock3.denselayer1.conv2.weight"]->value, std::sqrt(2.0 / (128 * 9)),
                 "dense conv2");
    check_uniform(p["classifier.weight"]->value, 1 / std::sqrt(1024.0), "classifier.weight");
    check_constant(p["classifier.bias"]->value, 0.f, "classifier.bias");
  } else if (name == "squeezenet1_0") {  // conv: kaiming_uniform; the final conv N(0, 0.01); biases 0
    check_uniform(p["features.0.weight"]->value, std::sqrt(6.0 / (3 * 49)), "features.0.weight");
    check_uniform(p["features.12.expand3x3.weight"]->value, std::sqrt(6.0 / (64 * 9)), "expand3x3");
    check_constant(p["features.3.squeeze.bias"]->value, 0.f, "fire bias");
    check_normal(p["classifier.1.weight"]->value, 0.01, "classifier.1.weight");
    check_constant(p["classifier.1.bias"]->value, 0.f, "classifier.1.bias");
  }
}

// Four VGGs are built in full below; these four only with a classifier 8 wide, since drawing
// the 123M weights of a full classifier takes seconds and all eight share it: their features
// ("features.*": torchvision's fingerprint and count) are what differs. The rest follows
// exactly from the classifier's shapes.
struct VggFeatures {
  int depth;
  bool bn;
  uint64_t fingerprint;
  int64_t keys;
};
const std::map<std::string, VggFeatures> kNarrowVggs = {{"vgg13", {13, false, 0x9528ced112ed70f6ull, 20}},
                                                        {"vgg11_bn", {11, true, 0xd8817f1d6f6f4293ull, 56}},
                                                        {"vgg13_bn", {13, true, 0x4eddcc69583c1b9bull, 70}},
                                                        {"vgg19_bn", {19, true, 0xde81b3928465b219ull, 112}}};
// Multiply-adds (= parameters less biases) of VGG's classifier at `hidden` and 1000 classes.
int64_t vgg_classifier_macs(int64_t hidden) { return 25088 * hidden + hidden * hidden + hidden * 1000; }

// Builds every model of a family at 1000 classes (one at a time: the VGGs are 0.5 GB each) and
// checks it against torchvision's numbers, its forward shapes and its FLOPs.
void check_family(const std::string& family, const std::vector<int>& sizes) {
  Context ctx = Context::cpu(1);
  int seen = 0;
  for (const auto& ref : torchvision_cnn_references()) {
    const zoo::ModelInfo& info = zoo::find_model(ref.name);
    if (info.family != family) continue;
    ++seen;
    CAPTURE(ref.name);
    zoo::ModelOptions o;
    o.num_classes = 1000;
    std::unique_ptr<nn::Module> m;
    int64_t parameters = ref.parameters, flops = ref.flops_at_64;
    if (auto narrow = kNarrowVggs.find(ref.name); narrow != kNarrowVggs.end()) {
      zoo::VggConfig c = zoo::vgg_config(narrow->second.depth, narrow->second.bn);
      c.hidden = 8;
      m = zoo::build_vgg(c, o);
      parameters -= vgg_classifier_macs(4096) + 4096 + 4096 + 1000 - (vgg_classifier_macs(8) + 8 + 8 + 1000);
      flops -= 2 * (vgg_classifier_macs(4096) - vgg_classifier_macs(8));
      int64_t keys = 0;
      CHECK(state_fingerprint(*m, &keys, "features.") == narrow->second.fingerprint);
      CHECK(keys == narrow->second.keys);
    } else {
      m = zoo::build_model(ref.name, o);
      int64_t keys = 0;
      CHECK(state_fingerprint(*m, &keys) == ref.fingerprint);
      CHECK(keys == ref.state_keys);
    }
    CHECK(count_parameters(*m) == parameters);
    std::map<std::string, Shape> shapes;
    for (auto& [name, p] : m->named_parameters()) shapes[name] = p->value.shape();
    for (auto& [name, t] : m->named_buffers()) shapes[name] = t->shape();
    for (const auto& [name, shape] : ref.sample_keys) {
      CAPTURE(name);
      if (kNarrowVggs.count(ref.name) && name.starts_with("classifier.")) continue;
      REQUIRE(shapes.count(name) == 1);
      CHECK(shapes[name] == shape);
    }
    CHECK(info.min_image_size == ref.min_image_size);
    check_initialisation(ref.name, *m);
    m->eval();
    for (int s : sizes) {
      const int size = std::max(s, info.min_image_size);
      CAPTURE(size);
      CHECK(m->forward(ctx, Tensor::zeros({1, 3, size, size})).shape() == Shape{1, 1000});
    }
    zoo::ModelStats stats = zoo::measure_module(*m, 3, 64, ctx);
    CHECK(stats.forward_flops == flops);
    CHECK(stats.parameters == parameters);
    CHECK(stats.activation_bytes > 0);
  }
  CHECK(seen > 0);
}

}  // namespace

TEST_CASE("resnet18/34/50/101/152: torchvision's parameters, keys, shapes, FLOPs, init; forward at 1, 32, 64") {
  check_family("resnet", {1, 32, 64});
}

TEST_CASE("vgg11/13/16/19 and _bn: torchvision's parameters, keys, shapes, FLOPs, init; forward at 32, 64") {
  check_family("vgg", {32, 64});
}

TEST_CASE("alexnet: torchvision's parameters, keys, shapes, FLOPs, init; forward at 63, 64, 100") {
  check_family("alexnet", {63, 64, 100});
}

TEST_CASE("densenet121/161/169/201: torchvision's parameters, keys, shapes, FLOPs, init; forward at 29, 64") {
  check_family("densenet", {29, 64});
}

TEST_CASE("squeezenet1_0/1_1: torchvision's parameters, keys, shapes, FLOPs, init; forward at min, 32, 64") {
  check_family("squeezenet", {1, 32, 64});
}

TEST_CASE("minimum input sizes are exact: the architecture runs at the minimum and fails one pixel below") {
  Context ctx = Context::cpu(1);
  zoo::ModelOptions o;
  o.num_classes = 3;
  // Small widths with torchvision's geometry (strides, kernels, paddings, poolings).
  auto tiny = [&](const std::string& family, int size) -> std::unique_ptr<nn::Module> {
    o.image_size = size;
    if (family == "resnet") return zoo::build_resnet({true, {1, 1, 1, 1}, 2}, o);
    if (family == "vgg") return zoo::build_vgg({{4, 0, 4, 0, 4, 0, 4, 0, 4, 0}, true, 8, 0.5f}, o);
    if (family == "alexnet") return zoo::build_alexnet({2, 8, 0.5f}, o);
    if (family == "densenet") return zoo::build_densenet({2, {1, 1, 1, 1}, 4, 2, 0.f}, o);
    return zoo::build_squeezenet(family == "squeezenet1_0" ? "1_0" : "1_1", o);
  };
  for (const auto& ref : torchvision_cnn_references()) {
    const zoo::ModelInfo& info = zoo::find_model(ref.name);
    if (ref.name.find("resnet") == 0 && ref.name != "resnet18") continue;  // one per geometry
    if (ref.name.find("vgg") == 0 && ref.name != "vgg11") continue;
    if (ref.name.find("densenet") == 0 && ref.name != "densenet121") continue;
    const std::string family = info.family == "squeezenet" ? ref.name : info.family;
    const int min = ref.min_image_size;
    CAPTURE(ref.name);
    auto at_min = tiny(family, min);
    at_min->eval();
    CHECK(at_min->forward(ctx, Tensor::zeros({1, 3, min, min})).shape() == Shape{1, 3});
    if (min > 1) {
      auto below = tiny(family, min);
      below->eval();
      CHECK_THROWS_AS(below->forward(ctx, Tensor::zeros({1, 3, min - 1, min - 1})), Error);
      zoo::ModelOptions small;
      small.image_size = min - 1;
      const std::string needle = "needs an input of at least " + std::to_string(min);
      CHECK_THROWS_WITH_AS(zoo::build_model(ref.name, small), doctest::Contains(needle.c_str()), UsageError);
    }
  }
}

TEST_CASE("the registry lists every family model with torchvision's defaults and a classifier path") {
  for (const auto& ref : torchvision_cnn_references()) {
    CAPTURE(ref.name);
    const zoo::ModelInfo& info = zoo::find_model(ref.name);
    CHECK(info.default_image_size == 224);
    CHECK(info.default_in_channels == 3);
    CHECK_FALSE(info.classifier.empty());
    CHECK_FALSE(info.note.empty());
  }
  CHECK(zoo::find_model("resnet18").classifier == "fc");
  CHECK(zoo::find_model("vgg16_bn").classifier == "classifier");
  // Channels other than 3 reach the stem.
  zoo::ModelOptions grey;
  grey.in_channels = 1;
  grey.num_classes = 10;
  grey.image_size = 32;
  auto m = zoo::build_model("resnet18", grey);
  CHECK(params_of(*m)["conv1.weight"]->value.shape() == Shape{64, 1, 7, 7});
  Context ctx = Context::cpu(1);
  m->eval();
  CHECK(m->forward(ctx, Tensor::zeros({2, 1, 32, 32})).shape() == Shape{2, 10});
}

TEST_CASE("a small variant of every family lowers its loss on a learnable synthetic batch") {
  // One thread: these models are too small for two to help, and ops this short slow down badly
  // when a second thread has to wait for a core that another process holds.
  Context ctx = Context::cpu(1);
  auto learns = [&](std::unique_ptr<nn::Module> root, int64_t size, const std::string& what, float lr = 0.02f,
                    int steps = 12) {
    CAPTURE(what);
    nn::Model model(std::move(root));
    model.train();
    nn::SGD sgd(model, {.lr = lr, .momentum = 0.9f});
    nn::CrossEntropyLoss loss;
    Batch b = two_class_batch(8, 3, size, 7);
    std::vector<float> losses;
    for (int step = 0; step < steps; ++step) {
      model.zero_grad(ctx);
      losses.push_back(loss.forward(ctx, model.forward(ctx, b.x), b.labels));
      model.backward(ctx, loss.backward(ctx));
      sgd.step(ctx);
    }
    const float last = (losses[steps - 3] + losses[steps - 2] + losses[steps - 1]) / 3;
    MESSAGE(what << ": loss " << losses[0] << " -> " << last);
    CHECK(last < 0.5f * losses[0]);
  };
  zoo::ModelOptions o;
  o.num_classes = 2;
  o.seed = 5;
  o.image_size = 16;
  learns(zoo::build_resnet({false, {1, 1, 1, 1}, 4}, o), 16, "resnet, basic blocks, width 4");
  learns(zoo::build_resnet({true, {1, 2, 1, 1}, 4}, o), 16, "resnet, bottlenecks, width 4");
  o.image_size = 32;
  learns(zoo::build_densenet({4, {2, 2, 2, 2}, 8, 2, 0.f}, o), 32, "densenet, growth 4");
  learns(zoo::build_squeezenet("1_1", o), 32, "squeezenet1_1");
  // VGG's N(0, 0.01) Linear layers pass a narrow classifier almost no gradient: 512 wide it learns.
  learns(zoo::build_vgg({{8, 0, 8, 0, 16, 0, 16, 0, 16, 0}, true, 512, 0.f}, o), 32, "vgg with batch norm, width 8",
         0.05f);
  // AlexNet at PyTorch's default initialisation shrinks the signal layer by layer and learns
  // slowly (PyTorch too, measured on this batch: 0.69 -> 0.35-0.52 in 12 steps at lr 0.1); it
  // gets its real width and 20 steps.
  o.image_size = 63;
  learns(zoo::build_alexnet({64, 256, 0.f}, o), 63, "alexnet, hidden 256", 0.1f, 20);
}
