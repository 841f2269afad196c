// swin_t, swin_s, swin_b and efficientnet_b0: parameter counts and state_dict keys (names and
// shapes) exactly as torchvision 0.14's, forward shapes at 224 and smaller inputs, the registry
// entries, and a smoke test that tiny variants of both learn.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "layers/layers.hpp"
#include "tests/zoo/zoo_test_util.hpp"
#include "zoo/efficientnet.hpp"
#include "zoo/registry.hpp"
#include "zoo/swin.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

zoo::ModelOptions imagenet(int image_size = 224) {
  zoo::ModelOptions o;
  o.num_classes = 1000;
  o.image_size = image_size;
  return o;
}

// One model per name for the whole suite (building swin_t draws 28M numbers); tests only read
// the parameters and run eval forwards, so sharing changes nothing they check.
nn::Module& shared_model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<nn::Module>> models;
  auto& m = models[name];
  if (!m) m = zoo::build_model(name, imagenet());
  return *m;
}

std::set<std::string> state_names(nn::Module& m) {
  std::set<std::string> s;
  for (auto& [name, p] : m.named_parameters()) s.insert(name);
  for (auto& [name, t] : m.named_buffers()) s.insert(name);
  return s;
}

// Names and shapes from torchvision.models.<model>().state_dict() (torchvision 0.14).
void check_keys(nn::Module& m, const std::vector<std::pair<std::string, Shape>>& expected) {
  std::map<std::string, Shape> shapes;
  for (auto& [name, p] : m.named_parameters()) shapes[name] = p->value.shape();
  for (auto& [name, t] : m.named_buffers()) shapes[name] = t->shape();
  for (const auto& [name, shape] : expected) {
    CAPTURE(name);
    REQUIRE(shapes.count(name) == 1);
    CHECK(shapes[name] == shape);
  }
}

}  // namespace

TEST_CASE("swin_t: 28,288,354 parameters; torchvision's 185 state_dict keys and shapes") {
  nn::Module* m = &shared_model("swin_t");
  CHECK(count_parameters(*m) == 28288354);
  int64_t keys = 0;
  // Python: FNV-1a 64 of "".join(f"{k}({','.join(map(str, v.shape))});" for k, v in sorted(sd.items()))
  CHECK(state_fingerprint(*m, &keys) == 0xf8292ce19d013729ull);
  CHECK(keys == 185);
  check_keys(*m, {{"features.0.0.weight", {96, 3, 4, 4}},
                  {"features.0.0.bias", {96}},
                  {"features.0.2.weight", {96}},
                  {"features.1.0.norm1.weight", {96}},
                  {"features.1.0.attn.relative_position_bias_table", {169, 3}},
                  {"features.1.0.attn.relative_position_index", {2401}},
                  {"features.1.0.attn.qkv.weight", {288, 96}},
                  {"features.1.0.attn.qkv.bias", {288}},
                  {"features.1.0.attn.proj.weight", {96, 96}},
                  {"features.1.1.norm2.bias", {96}},
                  {"features.1.1.mlp.0.weight", {384, 96}},
                  {"features.1.1.mlp.0.bias", {384}},
                  {"features.1.1.mlp.3.weight", {96, 384}},
                  {"features.2.reduction.weight", {192, 384}},
                  {"features.2.norm.weight", {384}},
                  {"features.5.5.attn.relative_position_bias_table", {169, 12}},
                  {"features.6.reduction.weight", {768, 1536}},
                  {"features.7.1.mlp.3.bias", {768}},
                  {"norm.weight", {768}},
                  {"head.weight", {1000, 768}},
                  {"head.bias", {1000}}});
  CHECK(state_names(*m).count("features.2.reduction.bias") == 0);  // bias=False, as torchvision
}

TEST_CASE("swin_s and swin_b: exact parameter counts and state_dict keys") {
  auto s = zoo::build_model("swin_s", imagenet());
  CHECK(count_parameters(*s) == 49606258);
  int64_t keys = 0;
  CHECK(state_fingerprint(*s, &keys) == 0x29418cc8f069afb9ull);
  CHECK(keys == 353);
  s.reset();
  auto b = zoo::build_model("swin_b", imagenet());
  CHECK(count_parameters(*b) == 87768224);
  CHECK(state_fingerprint(*b, &keys) == 0x7e09b20c25ea3513ull);
  CHECK(keys == 353);
  check_keys(*b, {{"features.0.0.weight", {128, 3, 4, 4}},
                  {"features.5.17.attn.relative_position_bias_table", {169, 16}},
                  {"features.5.17.mlp.0.weight", {2048, 512}},
                  {"features.6.reduction.weight", {1024, 2048}},
                  {"features.7.1.attn.relative_position_index", {2401}},
                  {"features.7.1.attn.qkv.weight", {3072, 1024}},
                  {"norm.bias", {1024}},
                  {"head.weight", {1000, 1024}}});
}

TEST_CASE("efficientnet_b0: 5,288,548 parameters; torchvision's 360 state_dict keys and shapes") {
  nn::Module* m = &shared_model("efficientnet_b0");
  CHECK(count_parameters(*m) == 5288548);
  int64_t keys = 0;
  CHECK(state_fingerprint(*m, &keys) == 0xe7a70d21f2a0fd35ull);
  CHECK(keys == 360);
  check_keys(*m, {{"features.0.0.weight", {32, 3, 3, 3}},
                  {"features.0.1.running_var", {32}},
                  {"features.0.1.num_batches_tracked", {}},
                  {"features.1.0.block.0.0.weight", {32, 1, 3, 3}},
                  {"features.1.0.block.1.fc1.weight", {8, 32, 1, 1}},
                  {"features.1.0.block.1.fc2.bias", {32}},
                  {"features.1.0.block.2.0.weight", {16, 32, 1, 1}},
                  {"features.2.0.block.0.0.weight", {96, 16, 1, 1}},
                  {"features.2.0.block.2.fc1.weight", {4, 96, 1, 1}},
                  {"features.6.3.block.1.0.weight", {1152, 1, 5, 5}},
                  {"features.6.3.block.2.fc1.weight", {48, 1152, 1, 1}},
                  {"features.6.3.block.3.1.running_mean", {192}},
                  {"features.7.0.block.3.0.weight", {320, 1152, 1, 1}},
                  {"features.8.0.weight", {1280, 320, 1, 1}},
                  {"features.8.1.bias", {1280}},
                  {"classifier.1.weight", {1000, 1280}},
                  {"classifier.1.bias", {1000}}});
  auto names = state_names(*m);
  CHECK(names.count("features.1.0.block.0.0.bias") == 0);  // convs before batch norm have no bias
}

TEST_CASE("efficientnet_b0: torchvision's stochastic depth, batch norm and initialisation") {
  nn::Module* m = &shared_model("efficientnet_b0");
  std::map<std::string, std::string> described;
  for (auto& [name, mod] : m->named_modules()) described[name] = mod->describe();
  CHECK(described["features.1.0.stochastic_depth"] == "StochasticDepth(p=0, mode=row)");
  CHECK(described["features.2.0.stochastic_depth"] == "StochasticDepth(p=0.0125, mode=row)");  // 0.2 * 1 / 16
  CHECK(described["features.7.0.stochastic_depth"] ==
        "StochasticDepth(p=0.1875, mode=row)");  // 0.2 * 15 / 16
  CHECK(described["features.0.1"] ==
        "BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  CHECK(described["classifier.0"] == "Dropout(p=0.2, inplace=False)");
  std::map<std::string, nn::Parameter*> params;
  for (auto& [name, p] : m->named_parameters()) params[name] = p;
  // kaiming_normal(fan_out): std sqrt(2 / (1152 * 25)) for the depthwise 5x5 conv of 1152 channels.
  auto w = params["features.6.3.block.1.0.weight"]->value.to_vector();
  double var = 0;
  for (float v : w) var += double(v) * v;
  CHECK(std::sqrt(var / w.size()) == doctest::Approx(std::sqrt(2.0 / (1152 * 25))).epsilon(0.03));
  auto fc = params["classifier.1.weight"]->value.to_vector();
  CHECK(*std::max_element(fc.begin(), fc.end()) <= 1 / std::sqrt(1000.0));  // U(+-1/sqrt(out))
  CHECK(*std::max_element(fc.begin(), fc.end()) > 0.99 / std::sqrt(1000.0));
  CHECK(params["classifier.1.bias"]->value.to_vector() == std::vector<float>(1000, 0.f));
}

TEST_CASE("swin_t: torchvision's stochastic depth schedule, shifts and initialisation") {
  nn::Module* m = &shared_model("swin_t");
  std::map<std::string, std::string> described;
  for (auto& [name, mod] : m->named_modules()) described[name] = mod->describe();
  CHECK(described["features.1.0.stochastic_depth"] == "StochasticDepth(p=0, mode=row)");
  CHECK(described["features.7.1.stochastic_depth"] == "StochasticDepth(p=0.2, mode=row)");  // 0.2 * 11 / 11
  CHECK(described["features.3.1.stochastic_depth"] ==
        "StochasticDepth(p=0.0545455, mode=row)");  // 0.2 * 3 / 11
  CHECK(described["features.1.0.attn"] ==
        "ShiftedWindowAttention(dim=96, window_size=[7, 7], shift_size=[0, 0], num_heads=3)");
  CHECK(described["features.1.1.attn"] ==
        "ShiftedWindowAttention(dim=96, window_size=[7, 7], shift_size=[3, 3], num_heads=3)");
  std::map<std::string, nn::Parameter*> params;
  for (auto& [name, p] : m->named_parameters()) params[name] = p;
  for (const char* name :
       {"features.5.3.mlp.0.weight", "head.weight", "features.1.0.attn.relative_position_bias_table"}) {
    CAPTURE(name);
    auto v = params[name]->value.to_vector();
    double var = 0;
    for (float x : v) var += double(x) * x;
    CHECK(std::sqrt(var / v.size()) == doctest::Approx(0.02).epsilon(0.05));  // trunc_normal(std 0.02)
  }
  CHECK(params["features.5.3.mlp.0.bias"]->value.to_vector() == std::vector<float>(1536, 0.f));
  CHECK(params["norm.weight"]->value.to_vector() == std::vector<float>(768, 1.f));
}

TEST_CASE("forward shapes: 224 and smaller inputs; the registry's limits") {
  // One thread: forwards of this size are quick on one core, while on a loaded machine each
  // parallel region can wait a scheduler slice for its second thread (kernel tests cover 2).
  Context ctx = Context::cpu(1);
  // Neither family has a parameter that depends on the input size, so one model serves all.
  nn::Module* swin = &shared_model("swin_t");
  swin->eval();
  Tensor image = randn({1, 3, 224, 224}, 5);
  Tensor logits = swin->forward(ctx, image);
  CHECK(logits.shape() == Shape{1, 1000});
  for (float v : logits.to_vector()) REQUIRE(std::isfinite(v));
  // 112: 28 -> 14 -> 7 -> 4 tokens (the odd 7 padded before merging); 64: 16 -> 8 -> 4 -> 2,
  // every stage padded to the 7x7 window; 36: a 9x9 map, padded to 14 and shifted.
  for (int size : {112, 64, 36}) {
    CAPTURE(size);
    CHECK(swin->forward(ctx, Tensor::zeros({2, 3, size, size})).shape() == Shape{2, 1000});
  }
  nn::Module* eff = &shared_model("efficientnet_b0");
  eff->eval();
  logits = eff->forward(ctx, image);
  CHECK(logits.shape() == Shape{1, 1000});
  for (float v : logits.to_vector()) REQUIRE(std::isfinite(v));
  for (int size : {64, 33, 1}) {
    CAPTURE(size);
    CHECK(eff->forward(ctx, Tensor::zeros({2, 3, size, size})).shape() == Shape{2, 1000});
  }
  // Other input channels and classes, on a small variant (MNIST-like 28x28 grey input).
  zoo::ModelOptions grey;
  grey.num_classes = 10;
  grey.in_channels = 1;
  grey.image_size = 28;
  auto mnist = zoo::build_swin({.embed_dim = 8, .depths = {1, 1}, .num_heads = {1, 2}}, grey);
  mnist->eval();
  CHECK(mnist->forward(ctx, Tensor::zeros({1, 1, 28, 28})).shape() == Shape{1, 10});
  CHECK(zoo::find_model("swin_b").default_image_size == 224);
  CHECK(zoo::find_model("efficientnet_b0").family == "efficientnet");
  zoo::ModelOptions tiny = imagenet(3);
  CHECK_THROWS_WITH_AS(zoo::build_model("swin_s", tiny),
                       doctest::Contains("swin_s needs an input of at least 4x4"), UsageError);
  swin->clear_cache();
  eff->clear_cache();
}

TEST_CASE("tiny Swin and EfficientNet-like models lower their loss on a learnable batch") {
  Context ctx = Context::cpu(1);
  auto learns = [&](std::unique_ptr<nn::Module> root, int64_t size, const std::string& what) {
    CAPTURE(what);
    nn::Model model(std::move(root));
    model.train();
    nn::SGD sgd(model, {.lr = 0.05f, .momentum = 0.9f});
    nn::CrossEntropyLoss loss;
    Batch b = two_class_batch(8, 3, size, 7);
    std::vector<float> losses;
    for (int step = 0; step < 12; ++step) {
      model.zero_grad(ctx);
      losses.push_back(loss.forward(ctx, model.forward(ctx, b.x), b.labels));
      model.backward(ctx, loss.backward(ctx));
      sgd.step(ctx);
    }
    const float last = (losses[9] + losses[10] + losses[11]) / 3;
    MESSAGE(what << ": loss " << losses[0] << " -> " << last);
    CHECK(last < 0.5f * losses[0]);
  };
  zoo::ModelOptions o;
  o.num_classes = 2;
  o.image_size = 16;
  o.seed = 3;
  zoo::SwinConfig swin{.patch_size = 4,
                       .embed_dim = 16,
                       .depths = {1, 1},
                       .num_heads = {2, 2},
                       .window_size = {2, 2},
                       .mlp_ratio = 2.0,
                       .stochastic_depth_prob = 0.1f};
  learns(zoo::build_swin(swin, o), 16, "swin (embed 16, depths 1-1, window 2)");
  zoo::EfficientNetConfig eff;
  eff.stages = {{{1, 3, 1, 8, 8}, 1}, {{4, 3, 2, 8, 16}, 2}};
  eff.last_channel = 32;
  learns(zoo::build_efficientnet(eff, o), 16, "efficientnet (stages 8-16, 3 MBConv blocks)");
}
