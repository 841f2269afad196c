// Tests of the CPU softmax kernels: a row-wise softmax with a trailing-dimension bias (a -100
// mask entry included) and its backward against torch (float64); thread invariance.
#include <doctest/doctest.h>

#include "kernels/ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;
using dpx::testing::randn;

TEST_CASE("softmax: bias broadcast over leading dimensions, forward and backward as torch") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::from({2, 2, 3}, {1, 2, 3, 0, 0, 0, -1, 0.5f, 2, 3, -3, 0});
  Tensor bias = Tensor::from({2, 3}, {0, -100, 0, 1, 2, -1});
  Tensor y = Tensor::empty({2, 2, 3});
  ops::softmax_forward(ctx, y, x, &bias);
  check_close(y,
              {0.11920292202211755, 0, 0.8807970779778823, 0.25949646034241913, 0.7053845126982412,
               0.03511902695933973, 0.04742587317756679, 0, 0.9525741268224334, 0.9867032910422682,
               0.0066483544788660046, 0.0066483544788660046},
              1e-6);
  Tensor dy = Tensor::from({2, 2, 3}, {1, 0, -1, 0.5f, 0.5f, 2, 0, 1, 0, -1, 2, 1});
  Tensor dx = Tensor::from({2, 2, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  ops::softmax_backward(ctx, dx, dy, y, ops::DxMode::add);
  check_close(
      dx,
      {1.209987170807013, 1, 1 - 0.20998717080701312, 1 - 0.013669894779927992, 1 - 0.03715862657722542,
       1.05082852135715334, 1, 1, 1, 1 - 0.03279976622156334, 1.019724060350214723, 1.013075705871348722},
      1e-6);
  // Without a bias every row sums to one.
  ops::softmax_forward(ctx, y, x, nullptr);
  auto v = y.to_vector();
  for (int r = 0; r < 4; ++r)
    CHECK(v[3 * r] + v[3 * r + 1] + v[3 * r + 2] == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(v[2] / v[1] == doctest::Approx(std::exp(1.0)).epsilon(1e-5));
}

TEST_CASE("softmax: 1 and 2 threads give identical bits; a bias that does not trail is an error") {
  Tensor x = randn({64, 4, 49, 49}, 1), bias = randn({4, 49, 49}, 2), dy = randn({64, 4, 49, 49}, 3);
  auto run = [&](int threads) {
    Context ctx = Context::cpu(threads);
    Tensor y = Tensor::empty(x.shape()), dx = Tensor::zeros(x.shape());
    ops::softmax_forward(ctx, y, x, &bias);
    ops::softmax_backward(ctx, dx, dy, y, ops::DxMode::add);
    return std::pair{y, dx};
  };
  auto [y1, dx1] = run(1);
  auto [y2, dx2] = run(2);
  CHECK(bitwise_equal(y1, y2));
  CHECK(bitwise_equal(dx1, dx2));
  Context ctx = Context::cpu();
  Tensor wrong = Tensor::zeros({49, 4}), y = Tensor::empty(x.shape());
  CHECK_THROWS_WITH_AS(
      ops::softmax_forward(ctx, y, x, &wrong),
      doctest::Contains("bias (49, 4) must have the shape of the trailing dimensions of x (64, 4, 49, 49)"),
      Error);
}
