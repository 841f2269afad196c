// Tests of the CPU smooth activations (sigmoid, SiLU, exact GELU): values and derivatives
// against torch (float64) at hand-picked points, backward accumulating, thread invariance.
#include <doctest/doctest.h>

#include <functional>
#include <limits>

#include "kernels/ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;
using dpx::testing::randn;

namespace {
const std::vector<float> kPoints = {-2.f, -1.f, 0.f, 0.5f, 1.f, 2.f};

using Forward = std::function<void(Context&, Tensor&, const Tensor&)>;
using Backward = std::function<void(Context&, Tensor&, const Tensor&, const Tensor&, ops::DxMode)>;

// Checks y = f(x) and dx = 1 + f'(x) (backward adds into a gradient of ones, dy = 1), then
// dx = f'(x) written over a gradient of NaN (DxMode::overwrite reads nothing of dx);
// `from_output` says whether backward reads y instead of x.
void check_activation(const Forward& fwd, const Backward& bwd, bool from_output,
                      const std::vector<double>& values, const std::vector<double>& slopes) {
  Context ctx = Context::cpu();
  Tensor x = Tensor::from({6}, kPoints), y = Tensor::empty({6});
  fwd(ctx, y, x);
  check_close(y, values, 2e-6);
  Tensor dx = Tensor::from({6}, {1, 1, 1, 1, 1, 1}), dy = Tensor::from({6}, {1, 1, 1, 1, 1, 1});
  bwd(ctx, dx, dy, from_output ? y : x, ops::DxMode::add);
  std::vector<double> want;
  for (double s : slopes) want.push_back(1.0 + s);
  check_close(dx, want, 2e-6);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor over = Tensor::from({6}, {nan, nan, nan, nan, nan, nan});
  bwd(ctx, over, dy, from_output ? y : x, ops::DxMode::overwrite);
  check_close(over, slopes, 2e-6);
}
}  // namespace

TEST_CASE("sigmoid: values and derivative (from the output) as torch") {
  check_activation(ops::sigmoid_forward, ops::sigmoid_backward, true,
                   {0.11920292202211755, 0.2689414213699951, 0.5, 0.6224593312018546, 0.7310585786300049,
                    0.8807970779778823},
                   {0.1049935854035065, 0.19661193324148185, 0.25, 0.2350037122015945, 0.19661193324148185,
                    0.10499358540350662});
}

TEST_CASE("silu: values and derivative as torch") {
  check_activation(ops::silu_forward, ops::silu_backward, false,
                   {-0.2384058440442351, -0.2689414213699951, 0.0, 0.3112296656009273, 0.7310585786300049,
                    1.7615941559557646},
                   {-0.09078424878489547, 0.07232948812851325, 0.5, 0.7399611873026519, 0.9276705118714869,
                    1.0907842487848955});
}

// Every SiLU value goes through the same vector exp (by_lanes, kernels/cpu/libmvec.hpp): a value's
// SiLU and derivative are the same bits alone, in a tensor's body, or in its last partial chunk,
// which batch norm's folded SiLU (and channels-last maps) rely on. A scalar exp at some
// positions (a loop the compiler split) differed from the vector one by an ulp on this data.
TEST_CASE("silu: a value's result does not depend on its position") {
  Context ctx = Context::cpu();
  const int64_t n = 4099;  // 256 whole chunks of 16 and a tail of 3
  Tensor x = randn({n}, 61, 4.f), dy = randn({n}, 62), y = Tensor::empty({n}), dx = Tensor::empty({n});
  ops::silu_forward(ctx, y, x);
  ops::silu_backward(ctx, dx, dy, x, ops::DxMode::overwrite);
  Tensor shifted_y = Tensor::empty({n - 5}), shifted_dx = Tensor::empty({n - 5});
  const Tensor shifted_x = Tensor::from({n - 5}, std::vector<float>(x.data<float>() + 5, x.data<float>() + n));
  const Tensor shifted_dy = Tensor::from({n - 5}, std::vector<float>(dy.data<float>() + 5, dy.data<float>() + n));
  ops::silu_forward(ctx, shifted_y, shifted_x);
  ops::silu_backward(ctx, shifted_dx, shifted_dy, shifted_x, ops::DxMode::overwrite);
  int64_t differ = 0;
  for (int64_t i = 5; i < n; ++i)
    differ += y.data<float>()[i] != shifted_y.data<float>()[i - 5] || dx.data<float>()[i] != shifted_dx.data<float>()[i - 5];
  for (int64_t i = 0; i < 64; ++i) {  // each value alone: a chunk of one, padded
    Tensor one_x = Tensor::from({1}, {x.data<float>()[i]}), one_dy = Tensor::from({1}, {dy.data<float>()[i]});
    Tensor one_y = Tensor::empty({1}), one_dx = Tensor::empty({1});
    ops::silu_forward(ctx, one_y, one_x);
    ops::silu_backward(ctx, one_dx, one_dy, one_x, ops::DxMode::overwrite);
    differ += one_y.data<float>()[0] != y.data<float>()[i] || one_dx.data<float>()[0] != dx.data<float>()[i];
  }
  CHECK(differ == 0);
}

TEST_CASE("gelu: exact erf form, values and derivative as torch") {
  // The tanh approximation differs from these by ~1e-4 at x = 2: the tolerance tells them apart.
  check_activation(ops::gelu_forward, ops::gelu_backward, false,
                   {-0.04550026389635842, -0.15865525393145702, 0.0, 0.34573123063700656, 0.841344746068543,
                    1.9544997361036416},
                   {-0.08523180107819692, -0.08331547058768635, 0.5, 0.8674951246561629, 1.0833154705876864,
                    1.085231801078197});
}

TEST_CASE("smooth activations: 1 and 2 threads give identical bits; errors name the op") {
  const int64_t n = 70001;
  Tensor x = randn({n}, 5, 3.f), dy = randn({n}, 6);
  auto run = [&](int threads) {
    Context ctx = Context::cpu(threads);
    Tensor y = Tensor::empty({n}), dx = Tensor::zeros({n});
    ops::gelu_forward(ctx, y, x);
    ops::silu_forward(ctx, y, y);  // in place is allowed: each element reads only itself
    ops::gelu_backward(ctx, dx, dy, x, ops::DxMode::add);
    ops::silu_backward(ctx, dx, dy, x, ops::DxMode::add);
    ops::sigmoid_backward(ctx, dx, dy, y, ops::DxMode::overwrite);
    return std::pair{y, dx};
  };
  auto [y1, dx1] = run(1);
  auto [y2, dx2] = run(2);
  CHECK(bitwise_equal(y1, y2));
  CHECK(bitwise_equal(dx1, dx2));
  Context ctx = Context::cpu();
  Tensor small = Tensor::zeros({3}), big = Tensor::zeros({4});
  CHECK_THROWS_WITH_AS(ops::gelu_forward(ctx, small, big), doctest::Contains("gelu_forward: y (3) and x (4)"),
                       Error);
}
