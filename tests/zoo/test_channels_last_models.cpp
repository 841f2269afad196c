// --memory-format channels_last on whole models (nn::Model::set_memory_format): narrow versions of
// resnet18 (basic blocks with downsampling), resnet50 (bottlenecks), vgg11_bn and alexnet (a
// Flatten over 7x7 and 6x6 maps, dropout), efficientnet_b0 (depthwise convolutions, squeeze and
// excitation, stochastic depth), squeezenet1_1 (Fire's joined branches) and densenet121 (the
// block's buffer, batch norms on its prefix, average-pooling transitions) give the contiguous
// model's logits, loss, every parameter gradient and every batch-norm statistic bit for bit, in
// training and in eval; a copy keeps the format; a model with a layer that has no channels-last
// computation is refused by name and left as it was. Under --precision bf16 (the host's emulation
// of the half-precision maps) the families also agree across formats and stay near fp32.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "layers/layers.hpp"
#include "layers/loss.hpp"
#include "layers/model.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"
#include "zoo/cnn.hpp"
#include "zoo/efficientnet.hpp"
#include "zoo_test_util.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;

namespace {

// The families' builders at small widths (the same layers and joins, fewer channels): a step of
// each takes milliseconds, also under the sanitizers.
nn::Model small_model(const std::string& family, int64_t size) {
  zoo::ModelOptions o;
  o.num_classes = 5;
  o.in_channels = 3;
  o.image_size = static_cast<int>(size);
  o.seed = 7;
  if (family == "resnet18" || family == "resnet50") {
    zoo::ResNetConfig c = zoo::resnet_config(family == "resnet18" ? 18 : 50);
    c.base_planes = 8;
    if (family == "resnet50") c.layers = {1, 2, 1, 1};
    return nn::Model(zoo::build_resnet(c, o));
  }
  if (family == "vgg11_bn" || family == "vgg11") {
    zoo::VggConfig c = zoo::vgg_config(11, family == "vgg11_bn");
    for (int& v : c.layers) v /= 16;  // 4 .. 32 channels, the max-poolings (0) where they were
    c.hidden = 24;
    return nn::Model(zoo::build_vgg(c, o));
  }
  if (family == "alexnet") return nn::Model(zoo::build_alexnet({.width = 8, .hidden = 24, .dropout = 0.5f}, o));
  if (family == "efficientnet_b0") {  // its first three stages: expansion, depthwise 3x3 and 5x5, SE, residuals
    zoo::EfficientNetConfig c = zoo::efficientnet_b0_config();
    c.stages.resize(3);
    return nn::Model(zoo::build_efficientnet(c, o));
  }
  if (family == "squeezenet1_1") return nn::Model(zoo::build_squeezenet("1_1", o));  // already small
  zoo::DenseNetConfig c = zoo::densenet_config(121);  // dense blocks, average-pooling transitions
  c.growth = 4;
  c.blocks = {2, 2, 1, 1};
  c.init_features = 8;
  return nn::Model(zoo::build_densenet(c, o));
}

// One training step's forward and backward (the logits and the gradients stay in the model), and
// an eval forward after it.
struct Step {
  Tensor logits, eval_logits;
  float loss = 0;
};
// SqueezeNet's dropout acts on a (N, 512, 13, 13) map and draws its mask in memory order, so in
// training the two formats drop other elements (as PyTorch's do); `map_dropout_off` runs its step
// with that dropout in eval mode. Dropout after Flatten (VGG, AlexNet) draws alike in both.
Step run(Context& ctx, nn::Model& m, const testing::Batch& b, bool map_dropout_off) {
  Step s;
  m.train();
  if (map_dropout_off)
    for (auto& [name, mod] : m.root().named_modules())
      if (mod->type_name() == "Dropout") mod->train(false);
  m.zero_grad(ctx);
  nn::CrossEntropyLoss loss;
  s.logits = m.forward(ctx, b.x);
  s.loss = loss.forward(ctx, s.logits, b.labels);
  m.backward(ctx, loss.backward(ctx));
  m.eval();
  s.eval_logits = m.forward(ctx, b.x);
  return s;
}

}  // namespace

TEST_CASE("channels_last models train and evaluate as contiguous ones, bit for bit") {
  Context ctx = Context::cpu(2);
  for (const auto& [name, size] : std::vector<std::pair<std::string, int64_t>>{
           {"resnet18", 32},
           {"resnet50", 32},
           {"vgg11_bn", 32},
           {"alexnet", 63},
           {"efficientnet_b0", 32},
           {"squeezenet1_1", 48},
           {"densenet121", 32}}) {
    CAPTURE(name);
    const testing::Batch b = testing::two_class_batch(2, 3, size, 11);
    nn::Model contiguous = small_model(name, size), last = small_model(name, size);
    last.set_memory_format(ops::MemoryFormat::channels_last);
    CHECK(last.memory_format() == ops::MemoryFormat::channels_last);
    const bool map_dropout = name == "squeezenet1_1";
    const Step want = run(ctx, contiguous, b, map_dropout), got = run(ctx, last, b, map_dropout);
    CHECK(bitwise_equal(got.logits, want.logits));
    CHECK(got.loss == want.loss);
    CHECK(bitwise_equal(last.flat_grads(), contiguous.flat_grads()));
    CHECK(bitwise_equal(got.eval_logits, want.eval_logits));
    const auto bufs_want = contiguous.root().named_buffers(), bufs_got = last.root().named_buffers();
    REQUIRE(bufs_got.size() == bufs_want.size());
    for (size_t i = 0; i < bufs_got.size(); ++i) CHECK(bitwise_equal(*bufs_got[i].second, *bufs_want[i].second));

    // A replica (DataParallel's, DDP's) keeps the format, and so computes the same.
    nn::Model copy = last.clone(Device::cpu());
    CHECK(copy.memory_format() == ops::MemoryFormat::channels_last);
    copy.eval();
    CHECK(bitwise_equal(copy.forward(ctx, b.x), want.eval_logits));
    // And back: contiguous again.
    last.set_memory_format(ops::MemoryFormat::contiguous);
    CHECK(bitwise_equal(last.forward(ctx, b.x), want.eval_logits));
  }
}

// Under --precision bf16 convolutions, batch norms, ReLUs and max pools hand each other bf16 maps (ops.def,
// "half-precision maps"; on the host through widened copies): every family that has them runs so, a
// training step and an eval forward in both memory formats with the same bits, and its eval-mode
// gradients stay near the fp32 ones: within what moving the input by half a bf16 unit (2^-9)
// moves fp32's, times 10, or 2 %. (A training step's gradients are no yardstick at batch 2: a
// batch norm over a few values per channel amplifies any rounding; tests/cuda/test_precision.cpp
// bounds the GPU's the same way.)
TEST_CASE("the families with bf16 maps between their layers: both memory formats alike, near fp32") {
  // Eval-mode gradients of one forward and backward.
  const auto eval_grads = [](Context& ctx, nn::Model& m, const testing::Batch& b, const Tensor& x) {
    m.eval();
    m.zero_grad(ctx);
    nn::CrossEntropyLoss loss;
    (void)loss.forward(ctx, m.forward(ctx, x), b.labels);
    m.backward(ctx, loss.backward(ctx));
    return m.flat_grads().clone();  // the model's own buffer is the next call's
  };
  for (const auto& [name, size] : std::vector<std::pair<std::string, int64_t>>{
           {"resnet18", 32},
           {"resnet50", 32},
           {"vgg11_bn", 32},
           {"vgg11", 32},
           {"alexnet", 63},
           {"squeezenet1_1", 32},
           {"efficientnet_b0", 32},
           {"densenet121", 32}}) {
    CAPTURE(name);
    const testing::Batch b = testing::two_class_batch(2, 3, size, 12);
    Context ctx = Context::cpu(2), ctx32 = Context::cpu(2);
    ctx.compute = DType::bf16;
    nn::Model contiguous = small_model(name, size), last = small_model(name, size);
    last.set_memory_format(ops::MemoryFormat::channels_last);
    const bool map_dropout = name == "squeezenet1_1";
    const Step want = run(ctx, contiguous, b, map_dropout), got = run(ctx, last, b, map_dropout);
    CHECK(bitwise_equal(got.logits, want.logits));
    CHECK(bitwise_equal(last.flat_grads(), contiguous.flat_grads()));
    CHECK(bitwise_equal(got.eval_logits, want.eval_logits));

    nn::Model half = small_model(name, size), f32 = small_model(name, size);
    const Tensor grads = eval_grads(ctx, half, b, b.x), grads32 = eval_grads(ctx32, f32, b, b.x);
    double sensitivity = 0;
    for (uint64_t seed : {31, 32})
      sensitivity = std::max(sensitivity, testing::norm_rel_diff(eval_grads(ctx32, f32, b, testing::moved_by(b.x, 0x1p-9, seed)),
                                                                 grads32));
    const double diff = testing::norm_rel_diff(grads, grads32);
    CAPTURE(diff);
    CAPTURE(sensitivity);
    CHECK(diff > 0);  // the maps were rounded
    CHECK(diff <= std::max(0.02, 10 * sensitivity));
  }
}

TEST_CASE("a model with a layer that has no channels-last computation is refused by name, and left as it was") {
  Context ctx = Context::cpu(2);
  // A convolution that accepts, then a permute and a layer norm over the last dimension, which do
  // not know where the channels lie (Swin's patch embedding is built so).
  auto make = [] {
    Rng rng(3);
    auto s = std::make_unique<nn::Sequential>();
    s->emplace<nn::Conv2d>(3, 4, 3, rng);
    s->emplace<nn::Permute>(std::vector<int>{0, 2, 3, 1});
    s->emplace<nn::LayerNorm>(4);
    return nn::Model(std::move(s));
  };
  nn::Model m = make();
  CHECK_THROWS_WITH_AS(m.set_memory_format(ops::MemoryFormat::channels_last),
                       doctest::Contains("--memory-format channels_last: 1 (Permute), 2 (LayerNorm) have no "
                                         "channels-last computation yet"),
                       UsageError);
  CHECK(m.memory_format() == ops::MemoryFormat::contiguous);
  // The convolution, which accepted, was set back: the model still runs on (N, C, H, W).
  const testing::Batch b = testing::two_class_batch(2, 3, 8, 12);
  nn::Model fresh = make();
  CHECK(bitwise_equal(m.forward(ctx, b.x), fresh.forward(ctx, b.x)));
}
