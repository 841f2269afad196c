// Tests of the CPU matrix products: linear forward/backward and batched matmul against hand
// values and plain loops, gradients accumulating, and thread-count invariance of the GEMM.
#include <doctest/doctest.h>

#include <array>

#include "kernels/ops.hpp"
#include "kernels/ref/ref_ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;
using dpx::testing::randn;

TEST_CASE("linear_forward: hand values with and without bias") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::from({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor w = Tensor::from({2, 3}, {1, 0, -1, 0.5f, 0.5f, 0.5f});
  Tensor b = Tensor::from({2}, {10, -10});
  Tensor y = Tensor::empty({2, 2});
  ops::linear_forward(ctx, y, x, w, &b);
  check_close(y, {1 - 3 + 10, 3 - 10, 4 - 6 + 10, 7.5 - 10});
  ops::linear_forward(ctx, y, x, w, nullptr);
  check_close(y, {-2, 3, -2, 7.5});
}

TEST_CASE("linear_backward: hand values, null gradients skipped, accumulates") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::from({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor w = Tensor::from({2, 3}, {1, 0, -1, 0.5f, 0.5f, 0.5f});
  Tensor dy = Tensor::from({2, 2}, {1, 2, -1, 0});
  Tensor dx = Tensor::zeros({2, 3}), dw = Tensor::zeros({2, 3}), db = Tensor::zeros({2});
  ops::linear_backward(ctx, &dx, &dw, &db, dy, x, w, ops::DxMode::add);
  // dx = dy w; dw = dy^T x; db = column sums of dy.
  check_close(dx, {2, 1, 0, -1, 0, 1});
  check_close(dw, {-3, -3, -3, 2, 4, 6});
  check_close(db, {0, 2});
  ops::linear_backward(ctx, &dx, nullptr, &db, dy, x, w, ops::DxMode::add);
  check_close(dx, {4, 2, 0, -2, 0, 2});
  check_close(dw, {-3, -3, -3, 2, 4, 6});
  check_close(db, {0, 4});
}

TEST_CASE("linear: shape errors name the op and the shapes") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::zeros({2, 3}), w = Tensor::zeros({4, 5}), y = Tensor::zeros({2, 4});
  CHECK_THROWS_WITH_AS(ops::linear_forward(ctx, y, x, w, nullptr),
                       doctest::Contains("linear_forward: x (2, 3) has 3 features"), Error);
  Tensor xi = Tensor::zeros({2, 3}, DType::i32), w3 = Tensor::zeros({4, 3});
  CHECK_THROWS_WITH_AS(ops::linear_forward(ctx, y, xi, w3, nullptr),
                       doctest::Contains("must be f32, got i32"), Error);
}

namespace {
// c = alpha op(a) op(b) + beta c by the reference kernel (kernels/ref/linear.cpp: triple loops
// summed in double).
std::vector<double> matmul_ref(const Tensor& a, const Tensor& b, const Tensor& c, int64_t batch,
                               int64_t M, int64_t N, int64_t K, bool ta, bool tb, double alpha,
                               double beta) {
  Context ctx = Context::cpu();
  Tensor out = c.clone();
  ref::matmul(ctx, out, a, b, ta, tb, static_cast<float>(alpha), static_cast<float>(beta));
  const auto v = out.to_vector();
  return std::vector<double>(v.begin(), v.end());
}
}  // namespace

TEST_CASE("matmul: batched, every transpose, alpha and beta, against plain loops") {
  Context ctx = Context::cpu(2);
  // The second shape is big enough to be cut into several GEMM tiles.
  for (auto [M, N, K] : {std::array<int64_t, 3>{5, 7, 3}, std::array<int64_t, 3>{150, 300, 50}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        CAPTURE(M);
        CAPTURE(ta);
        CAPTURE(tb);
        const int64_t batch = 2;
        Tensor a = randn(ta ? Shape{batch, K, M} : Shape{batch, M, K}, 1);
        Tensor b = randn(tb ? Shape{batch, N, K} : Shape{batch, K, N}, 2);
        Tensor c = randn({batch, M, N}, 3);
        auto want = matmul_ref(a, b, c, batch, M, N, K, ta, tb, 0.5, -2.0);
        ops::matmul(ctx, c, a, b, ta, tb, 0.5f, -2.f);
        check_close(c, want, 1e-5);
        // beta == 0 must not read c, even when it holds NaN.
        ops::fill(ctx, c, std::nanf(""));
        auto want0 = matmul_ref(a, b, Tensor::zeros({batch, M, N}), batch, M, N, K, ta, tb, 1, 0);
        ops::matmul(ctx, c, a, b, ta, tb, 1.f, 0.f);
        check_close(c, want0, 1e-5);
      }
}

TEST_CASE("matmul: mismatched inner sizes are a clear error") {
  Context ctx = Context::cpu();
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5}), c = Tensor::zeros({2, 5});
  CHECK_THROWS_WITH_AS(ops::matmul(ctx, c, a, b, false, false, 1.f, 0.f),
                       doctest::Contains("op(a) 2x3 times op(b) 4x5"), Error);
}

TEST_CASE("linear and matmul: bitwise identical for 1 and 2 threads") {
  Tensor x = randn({300, 257}, 4), w = randn({513, 257}, 5), b = randn({513}, 6);
  Tensor dy = randn({300, 513}, 7);
  auto run = [&](int threads) {
    Context ctx = Context::cpu(threads);
    Tensor y = Tensor::empty({300, 513});
    Tensor dx = Tensor::zeros({300, 257}), dw = Tensor::zeros({513, 257}),
           db = Tensor::zeros({513});
    ops::linear_forward(ctx, y, x, w, &b);
    ops::linear_backward(ctx, &dx, &dw, &db, dy, x, w, ops::DxMode::add);
    return std::array<Tensor, 4>{y, dx, dw, db};
  };
  auto one = run(1), two = run(2);
  for (int i = 0; i < 4; ++i) CHECK(bitwise_equal(one[i], two[i]));
}
