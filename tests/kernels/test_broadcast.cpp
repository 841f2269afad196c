// Tests of the CPU broadcasting ops (add/mul with numpy broadcasting, and the sums their
// backward takes) against a naive coordinate-by-coordinate reference, on the shapes SE,
// stochastic depth and Swin use and on mixed ones; thread invariance; errors.
#include <doctest/doctest.h>

#include "kernels/ops.hpp"
#include "kernels/ref/ref_ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;
using dpx::testing::randn;

namespace {

struct Reference {
  std::vector<double> out, da, db;  // a op b, and the backward's sums for dy
};

// The reference kernels (kernels/ref/broadcast.cpp, coordinate by coordinate).
Reference naive(const Shape& out, const Tensor& a, const Tensor& b, const Tensor& dy, bool mul) {
  Context ctx = Context::cpu();
  Tensor o = Tensor::empty(out), da = Tensor::zeros(a.shape()), db = Tensor::zeros(b.shape());
  if (mul) {
    ref::mul_broadcast(ctx, o, a, b);
    ref::mul_broadcast_backward(ctx, &da, &db, dy, a, b);
  } else {
    ref::add_broadcast(ctx, o, a, b);
    ref::add_broadcast_backward(ctx, &da, &db, dy);
  }
  auto values = [](const Tensor& t) {
    const auto v = t.to_vector();
    return std::vector<double>(v.begin(), v.end());
  };
  return {values(o), values(da), values(db)};
}

void check_against_naive(const Shape& out_shape, const Shape& a_shape, const Shape& b_shape, int threads) {
  CAPTURE(shape_str(out_shape));
  CAPTURE(shape_str(a_shape));
  CAPTURE(shape_str(b_shape));
  Context ctx = Context::cpu(threads);
  Tensor a = randn(a_shape, 1), b = randn(b_shape, 2), dy = randn(out_shape, 3);
  for (bool mul : {false, true}) {
    Reference want = naive(out_shape, a, b, dy, mul);
    Tensor out = Tensor::empty(out_shape), da = Tensor::zeros(a_shape), db = Tensor::zeros(b_shape);
    if (mul) {
      ops::mul_broadcast(ctx, out, a, b);
      ops::mul_broadcast_backward(ctx, &da, &db, dy, a, b);
    } else {
      ops::add_broadcast(ctx, out, a, b);
      ops::add_broadcast_backward(ctx, &da, &db, dy);
    }
    check_close(out, want.out, 1e-6);
    check_close(da, want.da, 1e-5);
    check_close(db, want.db, 1e-5);
  }
}

}  // namespace

TEST_CASE("add/mul_broadcast: hand values") {
  Context ctx = Context::cpu();
  Tensor a = Tensor::from({2, 1, 3}, {1, 2, 3, 4, 5, 6}), b = Tensor::from({1, 2, 1}, {10, 20});
  Tensor out = Tensor::empty({2, 2, 3});
  ops::add_broadcast(ctx, out, a, b);
  check_close(out, {11, 12, 13, 21, 22, 23, 14, 15, 16, 24, 25, 26});
  ops::mul_broadcast(ctx, out, a, b);
  check_close(out, {10, 20, 30, 20, 40, 60, 40, 50, 60, 80, 100, 120});
  // Backward accumulates: da starts at 1.
  Tensor dy = Tensor::from({2, 2, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2});
  Tensor da = Tensor::from({2, 1, 3}, {1, 1, 1, 1, 1, 1}), db = Tensor::zeros({1, 2, 1});
  ops::mul_broadcast_backward(ctx, &da, &db, dy, a, b);
  check_close(da, {31, 31, 31, 31, 31, 51});         // 1 + 10 + 20 (x2 for the last)
  check_close(db, {1 + 2 + 3 + 4 + 5 + 6, 21 + 6});  // sums of a times dy

  // The full-size factor's gradient (no dimension to sum: its own loop) accumulates too.
  Tensor x = Tensor::from({2, 3}, {1, 2, 3, 4, 5, 6}), s = Tensor::from({2, 1}, {10, 20});
  Tensor g = Tensor::from({2, 3}, {1, 2, 3, 4, 5, 6}), dx = Tensor::from({2, 3}, {1, 1, 1, 1, 1, 1});
  ops::mul_broadcast_backward(ctx, &dx, nullptr, g, x, s);
  check_close(dx, {11, 21, 31, 81, 101, 121});  // 1 + dy * s
  ops::add_broadcast_backward(ctx, &dx, nullptr, g);
  check_close(dx, {12, 23, 34, 85, 106, 127});  // + dy
}

TEST_CASE("add/mul_broadcast: the shapes dpx uses and mixed ones, against a naive reference") {
  check_against_naive({2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 1, 1}, 1);                    // squeeze-excitation
  check_against_naive({3, 2, 2, 4}, {3, 2, 2, 4}, {3, 1, 1, 1}, 1);                    // stochastic depth
  check_against_naive({3, 2, 5, 5}, {1, 2, 5, 5}, {3, 1, 5, 5}, 1);                    // position bias + mask
  check_against_naive({2, 3, 4}, {1, 3, 1}, {2, 1, 4}, 2);                             // both broadcast
  check_against_naive({4, 1, 3, 2, 2, 3}, {4, 1, 1, 2, 1, 3}, {1, 1, 3, 1, 2, 1}, 2);  // 6 dimensions
  check_against_naive({1, 1}, {1, 1}, {1, 1}, 1);                                      // one element
}

TEST_CASE("add/mul_broadcast: 1 and 2 threads give identical bits") {
  Tensor x = randn({8, 64, 20, 20}, 1), s = randn({8, 64, 1, 1}, 2), dy = randn({8, 64, 20, 20}, 3);
  Tensor attn = randn({64, 4, 49, 49}, 4), bias = randn({1, 4, 49, 49}, 5);
  auto run = [&](int threads) {
    Context ctx = Context::cpu(threads);
    Tensor y = Tensor::empty(x.shape()), dx = Tensor::zeros(x.shape()), ds = Tensor::zeros(s.shape());
    ops::mul_broadcast(ctx, y, x, s);
    ops::mul_broadcast_backward(ctx, &dx, &ds, dy, x, s);
    Tensor z = Tensor::empty(attn.shape()), dbias = Tensor::zeros(bias.shape());
    ops::add_broadcast(ctx, z, attn, bias);
    ops::add_broadcast_backward(ctx, nullptr, &dbias, z);
    return std::vector<Tensor>{y, dx, ds, z, dbias};
  };
  auto one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) CHECK(bitwise_equal(one[i], two[i]));
}

TEST_CASE("add/mul_broadcast: shapes that do not broadcast are errors naming them") {
  Context ctx = Context::cpu();
  Tensor out = Tensor::zeros({2, 3, 4}), a = Tensor::zeros({2, 3, 4}), b = Tensor::zeros({2, 3, 2});
  CHECK_THROWS_WITH_AS(ops::add_broadcast(ctx, out, a, b),
                       doctest::Contains("add_broadcast: b (2, 3, 2) does not broadcast to out (2, 3, 4)"),
                       Error);
  Tensor low = Tensor::zeros({3, 4});  // no implicit leading dimensions
  CHECK_THROWS_WITH_AS(ops::mul_broadcast(ctx, out, a, low), doctest::Contains("same number of dimensions"),
                       Error);
}
