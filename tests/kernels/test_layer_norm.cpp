// Tests of the CPU layer normalisation kernels: forward, saved statistics and every gradient
// against torch (float64) on a hand example; accumulation; thread invariance on a large input.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;
using dpx::testing::randn;

TEST_CASE("layer_norm: forward, statistics and backward as torch") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::from({2, 3}, {1, 2, 4, -1, 0, 3});
  Tensor gamma = Tensor::from({3}, {1, 0.5f, -2}), beta = Tensor::from({3}, {0, 1, 0.25f});
  Tensor y = Tensor::empty({2, 3}), mean = Tensor::empty({2}), rstd = Tensor::empty({2});
  ops::layer_norm_forward(ctx, y, mean, rstd, x, gamma, beta, 1e-5f);
  check_close(y,
              {-1.069041531450298, 0.8663698085687127, -2.4226038286257436, -0.9805789785364645,
               0.8038842042927071, -2.4956211399021},
              2e-6);
  check_close(mean, {7.0 / 3, 2.0 / 3}, 1e-6);
  check_close(rstd, {1 / std::sqrt(14.0 / 9 + 1e-5), 1 / std::sqrt(26.0 / 9 + 1e-5)}, 1e-6);

  Tensor dy = Tensor::from({2, 3}, {1, -1, 0.5f, 0.25f, 2, -1});
  Tensor dx = Tensor::from({2, 3}, {1, 1, 1, 1, 1, 1});  // backward adds to what is there
  Tensor dgamma = Tensor::from({3}, {1, 1, 1}), dbeta = Tensor::zeros({3});
  ops::layer_norm_backward(ctx, &dx, &dgamma, &dbeta, dy, x, gamma, mean, rstd, ops::DxMode::add);
  check_close(dx,
              {1.28635458271762637, 1 - 0.4295245721879206, 1.14316998947029358, 1 - 0.08485919963204286,
               1.11314316692765253, 1 - 0.028283967295609613},
              2e-6);
  check_close(dgamma, {1 - 1.314186276084414, 1 - 0.517202799966597, 1 - 0.7046596127946141}, 2e-6);
  check_close(dbeta, {1.25, 1.0, -0.5});
  // Only some gradients: the others are skipped, and dx alone matches.
  Tensor dx_only = Tensor::zeros({2, 3});
  ops::layer_norm_backward(ctx, &dx_only, nullptr, nullptr, dy, x, gamma, mean, rstd, ops::DxMode::add);
  check_close(dx_only,
              {0.28635458271762637, -0.4295245721879206, 0.14316998947029358, -0.08485919963204286,
               0.11314316692765253, -0.028283967295609613},
              2e-6);
}

TEST_CASE("layer_norm: 1 and 2 threads give identical bits on many rows") {
  const int64_t rows = 3001, D = 40;  // rows not a multiple of the chunk size
  Tensor x = randn({rows, D}, 1), dy = randn({rows, D}, 2);
  Tensor gamma = randn({D}, 3), beta = randn({D}, 4);
  auto run = [&](int threads) {
    Context ctx = Context::cpu(threads);
    Tensor y = Tensor::empty({rows, D}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
    ops::layer_norm_forward(ctx, y, mean, rstd, x, gamma, beta, 1e-5f);
    Tensor dx = Tensor::zeros({rows, D}), dg = Tensor::zeros({D}), db = Tensor::zeros({D});
    ops::layer_norm_backward(ctx, &dx, &dg, &db, dy, x, gamma, mean, rstd, ops::DxMode::add);
    return std::vector<Tensor>{y, dx, dg, db};
  };
  auto one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) CHECK(bitwise_equal(one[i], two[i]));
  // dbeta is the column sum of dy.
  std::vector<double> colsum(D, 0.0);
  auto dyv = dy.to_vector();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < D; ++j) colsum[j] += dyv[r * D + j];
  check_close(one[3], colsum, 1e-5);
}

TEST_CASE("layer_norm: shape errors name the op and the tensors") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::zeros({4, 8}), y = Tensor::zeros({4, 8}), mean = Tensor::zeros({4}),
         rstd = Tensor::zeros({4});
  Tensor gamma = Tensor::zeros({7}), beta = Tensor::zeros({8});
  CHECK_THROWS_WITH_AS(ops::layer_norm_forward(ctx, y, mean, rstd, x, gamma, beta, 1e-5f),
                       doctest::Contains("layer_norm_forward: gamma has shape (7), expected (8)"), Error);
  Tensor gamma8 = Tensor::zeros({8}), mean3 = Tensor::zeros({3});
  CHECK_THROWS_WITH_AS(ops::layer_norm_forward(ctx, y, mean3, rstd, x, gamma8, beta, 1e-5f),
                       doctest::Contains("one per row of x (4, 8)"), Error);
}
