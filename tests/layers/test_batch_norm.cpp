// BatchNorm2d / BatchNorm1d: gradient checks in training and eval mode (frozen too), running
// statistics against hand-computed values, state names and shapes as torchvision's.
#include <doctest/doctest.h>

#include <cmath>

#include "layers/activation.hpp"
#include "layers/batch_norm.hpp"
#include "layers/model.hpp"
#include "layers/sequential.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {
// gamma in [0.5, 1.5] and beta in [-0.5, 0.5], so the affine part is exercised too.
template <class BN>
void randomise_affine(BN& bn, uint64_t seed) {
  bn.weight().value.copy_from(uniform({bn.num_features()}, seed, 0.5f, 1.5f));
  bn.bias().value.copy_from(uniform({bn.num_features()}, seed + 1, -0.5f, 0.5f));
}
}  // namespace

TEST_CASE("BatchNorm2d: gradients in training mode (batch statistics)") {
  Context ctx = Context::cpu();
  nn::BatchNorm2d bn(3);
  randomise_affine(bn, 1);
  CHECK_GRADIENTS(ctx, bn, uniform({2, 3, 2, 2}, 2));
  CHECK_GRADIENTS(ctx, bn, uniform({3, 3, 3, 1}, 3, -2.f, 2.f));
}

TEST_CASE("BatchNorm1d and BatchNorm2d on (N, C) and (N, C, L): gradients in training mode") {
  Context ctx = Context::cpu();
  nn::BatchNorm1d bn1(3);
  randomise_affine(bn1, 4);
  CHECK_GRADIENTS(ctx, bn1, uniform({4, 3}, 5));
  CHECK_GRADIENTS(ctx, bn1, uniform({2, 3, 3}, 6));
  nn::BatchNorm2d bn2(4);
  CHECK_GRADIENTS(ctx, bn2, uniform({5, 4}, 7));
}

TEST_CASE("BatchNorm2d: gradients in eval mode (running statistics), trainable and frozen") {
  Context ctx = Context::cpu();
  nn::BatchNorm2d bn(3);
  randomise_affine(bn, 8);
  bn.running_mean().copy_from(uniform({3}, 9, -0.5f, 0.5f));
  bn.running_var().copy_from(uniform({3}, 10, 0.3f, 2.f));
  bn.eval();
  CHECK_GRADIENTS(ctx, bn, uniform({2, 3, 2, 3}, 11));
  CHECK_GRADIENTS(ctx, bn, uniform({4, 3}, 12));
  // A frozen feature extractor: no parameter gradients, dx still right.
  bn.weight().requires_grad = false;
  bn.bias().requires_grad = false;
  CHECK_GRADIENTS(ctx, bn, uniform({2, 3, 2, 2}, 13));
}

TEST_CASE("BatchNorm2d/1d + SiLU run as one (Sequential, Epilogue::silu): gradients in training and eval mode") {
  Context ctx = Context::cpu();
  auto bn_silu = [](auto bn) {
    randomise_affine(*bn, 14);
    auto seq = std::make_unique<nn::Sequential>();
    seq->add(std::move(bn));
    seq->add(std::make_unique<nn::SiLU>());
    return seq;
  };
  auto planes = bn_silu(std::make_unique<nn::BatchNorm2d>(3));
  auto rows = bn_silu(std::make_unique<nn::BatchNorm1d>(3));
  CHECK_GRADIENTS(ctx, *planes, uniform({2, 3, 2, 2}, 15, -2.f, 2.f));
  CHECK_GRADIENTS(ctx, *rows, uniform({5, 3}, 16, -2.f, 2.f));
  planes->eval();
  CHECK_GRADIENTS(ctx, *planes, uniform({2, 3, 2, 3}, 17, -2.f, 2.f));
}

TEST_CASE("BatchNorm: backward must match the epilogue its forward applied") {
  Context ctx = Context::cpu();
  nn::BatchNorm2d bn(3);
  const Tensor x = uniform({2, 3, 2, 2}, 18), dy = uniform({2, 3, 2, 2}, 19);
  const Tensor y = bn.forward(ctx, x, ops::Epilogue::relu);
  CHECK_THROWS_WITH_AS(bn.backward(ctx, dy), doctest::Contains("backward needs that ReLU's output"), dpx::Error);
  bn.forward(ctx, x);
  CHECK_THROWS_WITH_AS(bn.backward(ctx, dy, &y), doctest::Contains("given a ReLU's output, but the forward applied "
                                                                   "epilogue none"),
                       dpx::Error);
}

TEST_CASE("BatchNorm2d: output and running statistics after steps equal hand-computed values") {
  Context ctx = Context::cpu();
  nn::BatchNorm2d bn(2);  // momentum 0.1, eps 1e-5
  // x (2, 2, 1, 2): channel 0 holds 1, 2, 3, 6 (mean 3, biased var 3.5, unbiased 14/3);
  // channel 1 holds 0, 0, 2, -2 (mean 0, biased var 2, unbiased 8/3).
  Tensor x = Tensor::from({2, 2, 1, 2}, {1, 2, 0, 0, 3, 6, 2, -2});
  auto y = bn.forward(ctx, x).to_vector();
  CHECK(y[0] == doctest::Approx((1 - 3) / std::sqrt(3.5 + 1e-5)));
  CHECK(y[5] == doctest::Approx((6 - 3) / std::sqrt(3.5 + 1e-5)));
  CHECK(y[6] == doctest::Approx(2 / std::sqrt(2 + 1e-5)));
  auto rm = bn.running_mean().to_vector(), rv = bn.running_var().to_vector();
  CHECK(rm[0] == doctest::Approx(0.3));
  CHECK(rm[1] == doctest::Approx(0.0));
  CHECK(rv[0] == doctest::Approx(0.9 + 0.1 * 14.0 / 3));
  CHECK(rv[1] == doctest::Approx(0.9 + 0.1 * 8.0 / 3));
  CHECK(bn.num_batches_tracked().data<int64_t>()[0] == 1);

  // The count is the op's own (batch_norm_forward_train's batches_tracked): no increment_i64 of
  // its own, which was a kernel launch a batch norm a step on a GPU.
  const auto calls = dpx::testing::op_calls([&] { bn.forward(ctx, x); });
  CHECK(calls.count("increment_i64") == 0);
  CHECK(calls.at("batch_norm_forward_train") == 1);
  rm = bn.running_mean().to_vector();
  rv = bn.running_var().to_vector();
  CHECK(rm[0] == doctest::Approx(0.9 * 0.3 + 0.1 * 3));
  CHECK(rv[0] == doctest::Approx(0.9 * (0.9 + 0.1 * 14.0 / 3) + 0.1 * 14.0 / 3));
  CHECK(bn.num_batches_tracked().data<int64_t>()[0] == 2);

  // Eval normalises with the running statistics and leaves them alone.
  bn.eval();
  auto ye = bn.forward(ctx, x).to_vector();
  CHECK(ye[0] == doctest::Approx((1 - rm[0]) / std::sqrt(rv[0] + 1e-5)));
  CHECK(bn.running_mean().to_vector() == rm);
  CHECK(bn.num_batches_tracked().data<int64_t>()[0] == 2);
}

TEST_CASE("BatchNorm2d: torchvision state names, shapes and initial values") {
  nn::Model model([] {
    auto bn = std::make_unique<nn::BatchNorm2d>(4);
    return bn;
  }());
  auto state = model.state_dict();
  CHECK(state.size() == 5);
  CHECK(state.at("weight").to_vector() == std::vector<float>(4, 1.f));
  CHECK(state.at("bias").to_vector() == std::vector<float>(4, 0.f));
  CHECK(state.at("running_mean").to_vector() == std::vector<float>(4, 0.f));
  CHECK(state.at("running_var").to_vector() == std::vector<float>(4, 1.f));
  const Tensor& tracked = state.at("num_batches_tracked");
  CHECK(tracked.dtype() == DType::i64);
  CHECK(tracked.dim() == 0);
  CHECK(tracked.numel() == 1);
  CHECK(model.num_parameters() == 8);
}

TEST_CASE("BatchNorm: describe and errors") {
  Context ctx = Context::cpu();
  nn::BatchNorm2d bn(64);
  CHECK(bn.describe() == "BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  CHECK(nn::BatchNorm1d(10, 1e-3f, 0.01f).describe() ==
        "BatchNorm1d(10, eps=0.001, momentum=0.01, affine=True, track_running_stats=True)");
  CHECK(bn.clone()->type_name() == "BatchNorm2d");
  CHECK(nn::BatchNorm1d(3).clone()->type_name() == "BatchNorm1d");
  CHECK_THROWS_WITH_AS(bn.forward(ctx, Tensor::zeros({2, 32, 4, 4})),
                       doctest::Contains("BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True) "
                                         "given input (2, 32, 4, 4)"),
                       dpx::Error);
  CHECK_THROWS_WITH_AS(bn.forward(ctx, Tensor::zeros({1, 64})), doctest::Contains("more than one value per channel"),
                       dpx::Error);
  bn.eval();
  CHECK(bn.forward(ctx, Tensor::zeros({1, 64})).shape() == Shape{1, 64});
}
