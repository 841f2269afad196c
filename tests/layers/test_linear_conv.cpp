// Linear and Conv2d: gradient checks over every configuration knob, PyTorch's default
// initialisation in distribution, determinism from a seed, and error messages.
#include <doctest/doctest.h>

#include <cmath>

#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {
// U(-b, b): all values inside, both ends reached, mean 0 and variance b^2 / 3.
void check_uniform(const Tensor& t, double bound) {
  Moments m = moments(t);
  CHECK(m.min >= -bound);
  CHECK(m.max <= bound);
  CHECK(m.min < -0.95 * bound);
  CHECK(m.max > 0.95 * bound);
  CHECK(std::abs(m.mean) < 0.05 * bound);
  CHECK(m.var == doctest::Approx(bound * bound / 3).epsilon(0.05));
}
}  // namespace

TEST_CASE("Linear: gradients of input, weight and bias") {
  Context ctx = Context::cpu();
  Rng rng(1);
  nn::Linear fc(4, 3, rng);
  CHECK_GRADIENTS(ctx, fc, uniform({2, 4}, 2));
  nn::Linear no_bias(5, 2, rng, /*bias=*/false);
  CHECK(no_bias.num_params() == 1);
  CHECK_GRADIENTS(ctx, no_bias, uniform({3, 5}, 3));
  // Leading dimensions are rows: (B, L, in) as a transformer block feeds it.
  CHECK_GRADIENTS(ctx, fc, uniform({2, 2, 4}, 4));
}

TEST_CASE("Linear: forward is x W^T + b") {
  Context ctx = Context::cpu();
  Rng rng(1);
  nn::Linear fc(2, 2, rng);
  fc.weight().value.copy_from(Tensor::from({2, 2}, {1, 2, 3, 4}));
  fc.bias()->value.copy_from(Tensor::from({2}, {0.5f, -1}));
  Tensor y = fc.forward(ctx, Tensor::from({1, 2}, {1, -1}));
  CHECK(y.shape() == Shape{1, 2});
  CHECK(y.to_vector() == std::vector<float>{-0.5f, -2.f});
}

TEST_CASE("Linear: PyTorch default initialisation, deterministic from the seed") {
  Rng rng(7);
  nn::Linear fc(400, 300, rng);
  check_uniform(fc.weight().value, 1.0 / 20);
  check_uniform(fc.bias()->value, 1.0 / 20);
  Rng same(7), other(8);
  nn::Linear again(400, 300, same), different(400, 300, other);
  CHECK(again.weight().value.to_vector() == fc.weight().value.to_vector());
  CHECK(again.bias()->value.to_vector() == fc.bias()->value.to_vector());
  CHECK(different.weight().value.to_vector() != fc.weight().value.to_vector());
  // Consecutive layers from one generator draw different numbers.
  nn::Linear next(400, 300, rng);
  CHECK(next.weight().value.to_vector() != fc.weight().value.to_vector());
}

TEST_CASE("Linear: describe and errors name the layer and the shapes") {
  Context ctx = Context::cpu();
  Rng rng(1);
  nn::Linear fc(784, 10, rng);
  CHECK(fc.describe() == "Linear(in_features=784, out_features=10, bias=True)");
  CHECK_THROWS_WITH_AS(fc.forward(ctx, Tensor::zeros({32, 100})),
                       doctest::Contains("Linear(in_features=784, out_features=10, bias=True) given input (32, 100)"),
                       dpx::Error);
  CHECK_THROWS_WITH_AS(fc.backward(ctx, Tensor::zeros({32, 10})), doctest::Contains("before forward"), dpx::Error);
  fc.forward(ctx, Tensor::zeros({4, 784}));
  CHECK_THROWS_WITH_AS(fc.backward(ctx, Tensor::zeros({4, 11})), doctest::Contains("dy (4, 11), expected (4, 10)"),
                       dpx::Error);
}

TEST_CASE("Conv2d: gradients with padding, stride, dilation and groups") {
  Context ctx = Context::cpu();
  Rng rng(3);
  SUBCASE("3x3, padding 1") {
    nn::Conv2d conv(2, 3, 3, rng, /*stride=*/1, /*padding=*/1);
    CHECK_GRADIENTS(ctx, conv, uniform({2, 2, 5, 5}, 10));
  }
  SUBCASE("stride 2, dilation 2, no bias") {
    nn::Conv2d conv(2, 2, 3, rng, /*stride=*/2, /*padding=*/2, /*dilation=*/2, /*groups=*/1, /*bias=*/false);
    CHECK(conv.num_params() == 1);
    CHECK_GRADIENTS(ctx, conv, uniform({1, 2, 7, 6}, 11));
  }
  SUBCASE("rectangular kernel, stride, padding and dilation; 2 groups") {
    nn::Conv2dOptions o{.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 1, .pad_h = 1,
                        .pad_w = 0, .dilation_h = 1, .dilation_w = 2, .groups = 2};
    nn::Conv2d conv(4, 6, o, rng);
    CHECK(conv.weight().value.shape() == Shape{6, 2, 3, 2});
    CHECK(conv.output_shape({2, 4, 6, 5}) == Shape{2, 6, 3, 3});
    CHECK_GRADIENTS(ctx, conv, uniform({2, 4, 6, 5}, 12));
  }
  SUBCASE("depthwise (groups = channels)") {
    nn::Conv2d conv(3, 3, 3, rng, 1, 1, 1, /*groups=*/3);
    CHECK_GRADIENTS(ctx, conv, uniform({2, 3, 4, 4}, 13));
  }
}

TEST_CASE("Conv2d: PyTorch default initialisation uses fan_in = C_in / groups * kH * kW") {
  Rng rng(5);
  nn::Conv2d conv(32, 64, 5, rng, 1, 0, 1, /*groups=*/2);  // fan_in = 16 * 25 = 400
  check_uniform(conv.weight().value, 1.0 / 20);
  nn::Conv2d rect(8, 400, {.kernel_h = 1, .kernel_w = 7}, rng);  // fan_in = 56
  check_uniform(rect.weight().value, 1.0 / std::sqrt(56.0));
  check_uniform(rect.bias()->value, 1.0 / std::sqrt(56.0));
}

TEST_CASE("Conv2d: describe as torch and errors naming the layer and shapes") {
  Context ctx = Context::cpu();
  Rng rng(1);
  nn::Conv2d conv(3, 64, 7, rng, 2, 3, 1, 1, false);
  CHECK(conv.describe() == "Conv2d(3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)");
  nn::Conv2d grouped(4, 8, 3, rng, 1, 0, 2, 4);
  CHECK(grouped.describe() == "Conv2d(4, 8, kernel_size=(3, 3), stride=(1, 1), dilation=(2, 2), groups=4)");
  CHECK_THROWS_WITH_AS(conv.forward(ctx, Tensor::zeros({1, 1, 32, 32})),
                       doctest::Contains("given input (1, 1, 32, 32): expected (N, 3, H, W)"), dpx::Error);
  nn::Conv2d unpadded(3, 4, 5, rng);
  CHECK_THROWS_WITH_AS(unpadded.forward(ctx, Tensor::zeros({1, 3, 4, 9})), doctest::Contains("smaller than"),
                       dpx::Error);
  CHECK_THROWS_WITH_AS(nn::Conv2d(3, 4, 3, rng, 1, 0, 1, 2), doctest::Contains("divisible by groups"), dpx::Error);
}
