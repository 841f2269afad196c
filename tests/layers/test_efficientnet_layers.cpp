// EfficientNet's layers: SqueezeExcitation (SiLU and its default ReLU) and MBConv (with and
// without the residual, expansion and stride 2, in training and eval), by finite differences
// over the input and every parameter; torchvision's names and channel rules.
#include <doctest/doctest.h>

#include <algorithm>

#include "layers/activation.hpp"
#include "layers/mbconv.hpp"
#include "layers/squeeze_excitation.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

TEST_CASE("SqueezeExcitation: gradients; gates scale each channel of each sample") {
  Context ctx = Context::cpu();
  Rng rng(1);
  nn::SqueezeExcitation se(4, 2, rng, std::make_unique<nn::SiLU>());
  std::vector<std::string> names;
  for (auto& [name, p] : se.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  Tensor x = uniform({2, 4, 3, 3}, 10);
  CHECK_GRADIENTS(ctx, se, x);
  // y / x is one gate in (0, 1) per (n, c).
  auto xv = x.to_vector(), yv = se.forward(ctx, x).to_vector();
  for (int nc = 0; nc < 8; ++nc) {
    const double gate = yv[nc * 9] / xv[nc * 9];
    CHECK(gate > 0.0);
    CHECK(gate < 1.0);
    for (int i = 1; i < 9; ++i) CHECK(yv[nc * 9 + i] == doctest::Approx(gate * xv[nc * 9 + i]).epsilon(1e-5));
  }
  // torchvision's default activation is ReLU: its kink is skipped where the differences see it.
  nn::SqueezeExcitation relu_se(4, 3, rng);
  CHECK(relu_se.child(3).type_name() == "ReLU");
  GradCheckOptions opt;
  opt.skip_kinks = true;
  auto r = gradcheck(ctx, relu_se, x, opt);
  CHECK_MESSAGE(r.ok(), r.summary());
  CHECK(r.skipped < r.checked / 10);
  CHECK_THROWS_WITH_AS(se.forward(ctx, Tensor::zeros({2, 3, 3, 3})),
                       doctest::Contains("SqueezeExcitation(4, 2) given input (2, 3, 3, 3)"), Error);
  // Backward: x's two paths meet in the second mul_broadcast_backward, adding into the gradient the
  // average pool wrote over a fresh tensor: no map-sized zero-fill, no axpy.
  const Tensor y = se.forward(ctx, x);
  Tensor dx;
  const auto calls = op_calls([&] { dx = se.backward(ctx, uniform(y.shape(), 11)); });
  CHECK(calls.count("axpy") == 0);
  CHECK(calls.at("fill") == 1);  // the gates' (2, 4, 1, 1) gradient
  CHECK(calls.at("mul_broadcast_backward") == 2);
  CHECK(dx.shape() == x.shape());
}

TEST_CASE("make_divisible and conv_norm_activation follow torchvision") {
  CHECK(nn::make_divisible(32 * 1.0, 8) == 32);
  CHECK(nn::make_divisible(16 * 6.0, 8) == 96);
  CHECK(nn::make_divisible(32 * 1.1, 8) == 32);   // 35.2 -> 32 (within 10%)
  CHECK(nn::make_divisible(3, 8) == 8);           // never below the divisor
  CHECK(nn::make_divisible(44, 8) == 48);         // 44 + 4 = 48
  CHECK(nn::make_divisible(37 * 1.0, 16) == 48);  // 32 would lose > 10%
  Rng rng(2);
  auto cna = nn::conv_norm_activation(8, 16, 5, 2, 8, std::make_unique<nn::SiLU>(), {1e-3f, 0.01f}, rng);
  CHECK(cna->describe() == "Sequential(0: Conv2d, 1: BatchNorm2d, 2: SiLU)");
  CHECK(cna->child(0).describe() ==
        "Conv2d(8, 16, kernel_size=(5, 5), stride=(2, 2), padding=(2, 2), groups=8, bias=False)");
  CHECK(cna->child(1).describe() ==
        "BatchNorm2d(16, eps=0.001, momentum=0.01, affine=True, track_running_stats=True)");
}

TEST_CASE("MBConv: gradients with the residual (expanded, SE, stochastic depth), train and eval") {
  Context ctx = Context::cpu();
  Rng rng(4);
  nn::MBConv block({.expand_ratio = 2, .kernel = 3, .stride = 1, .input_channels = 4, .out_channels = 4},
                   0.5f, rng);
  CHECK(block.use_res_connect());
  Tensor x = uniform({3, 4, 4, 4}, 20);
  // Stochastic depth must keep some samples and drop others for the check to cover both.
  {
    auto probe = block.clone();
    auto y = probe->forward(ctx, x).to_vector(), xv = x.to_vector();
    int identical = 0;
    for (int n = 0; n < 3; ++n)
      identical += std::equal(y.begin() + n * 64, y.begin() + (n + 1) * 64, xv.begin() + n * 64);
    CHECK(identical > 0);
    CHECK(identical < 3);
  }
  std::vector<std::string> names;
  for (auto& [name, t] : block.named_buffers()) names.push_back(name);
  CHECK(names.size() == 9);  // three batch norms: running_mean, running_var, num_batches_tracked
  CHECK(names[0] == "block.0.1.running_mean");
  CHECK(names[8] == "block.3.1.num_batches_tracked");
  CHECK_GRADIENTS(ctx, block, x);
  // Batch statistics curve: the default step's truncation error (~eps^2) reaches ~3e-3 on the
  // parameters; at a step of 3e-3 it falls ~4x (while roundoff, ~1/eps, grows on the input).
  GradCheckOptions fine;
  fine.eps = 3e-3f;
  CHECK_GRADIENTS(ctx, block, x, fine);
  block.eval();
  CHECK_GRADIENTS(ctx, block, x);
}

TEST_CASE("MBConv: gradients without residual (stride 2, no expansion); torchvision's layout") {
  Context ctx = Context::cpu();
  Rng rng(4);
  nn::MBConv down({.expand_ratio = 1, .kernel = 5, .stride = 2, .input_channels = 8, .out_channels = 6}, 0.2f,
                  rng);
  CHECK_FALSE(down.use_res_connect());
  // Expand ratio 1: no expansion conv; depthwise, SE (squeeze max(1, 8 / 4) = 2), project.
  auto& seq = down.child<nn::Sequential>(0);
  CHECK(seq.size() == 3);
  CHECK(seq.child(1).describe() == "SqueezeExcitation(8, 2)");
  // Expanded channels are rounded to multiples of 8 as torchvision does: 4 x 1 -> 8, so a
  // 4-channel block expands even at ratio 1.
  nn::MBConv odd({.expand_ratio = 1, .kernel = 3, .stride = 1, .input_channels = 4, .out_channels = 4}, 0.f,
                 rng);
  CHECK(odd.child<nn::Sequential>(0).size() == 4);
  Tensor x = uniform({2, 8, 5, 5}, 21);
  CHECK(down.forward(ctx, x).shape() == Shape{2, 6, 3, 3});
  // Batch statistics over 2 x 3 x 3 values curve strongly: the default step's truncation error
  // (~eps^2) reaches 4e-3; a step of 3e-3 shrinks it ~9x, as eps^2 does, so it is no bug.
  CHECK_GRADIENTS(ctx, down, x);
  GradCheckOptions fine;
  fine.eps = 3e-3f;
  CHECK_GRADIENTS(ctx, down, x, fine);
  CHECK_THROWS_WITH_AS(
      nn::MBConv({.expand_ratio = 1, .kernel = 3, .stride = 3, .input_channels = 4, .out_channels = 4}, 0.f,
                 rng),
      doctest::Contains("illegal stride 3"), Error);
}
