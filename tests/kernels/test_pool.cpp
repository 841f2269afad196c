// Tests of the CPU pooling kernels: max (values, arg-max, first maximum wins, padding as -inf,
// ceil_mode), average (count_include_pad, padding, ceil_mode) and adaptive average (bins that
// do not divide evenly), forward and backward, against hand values and plain loops.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/ops.hpp"
#include "kernels/ref/ref_ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/kernels/kernel_params.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;
using dpx::testing::for_each_half_host_case;
using dpx::testing::poisoned;
using dpx::testing::pool_params;
using dpx::testing::randn;

namespace {

Tensor iota(const Shape& shape, float start, float step = 1.f) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + step * i;
  return t;
}

// Average pooling by the reference kernel (kernels/ref/pool.cpp): forward y and backward dx for dy.
void avg_reference(const Tensor& x, const Tensor& dy, const ops::Pool2dParams& p,
                   std::vector<double>& y, std::vector<double>& dx) {
  Context ctx = Context::cpu();
  Tensor ry = Tensor::empty(dy.shape()), rdx = Tensor::zeros(x.shape());
  ref::avg_pool2d_forward(ctx, ry, x, p);
  ref::avg_pool2d_backward(ctx, rdx, dy, p, ops::DxMode::add);
  const auto yv = ry.to_vector(), dxv = rdx.to_vector();
  y.assign(yv.begin(), yv.end());
  dx.assign(dxv.begin(), dxv.end());
}

}  // namespace

TEST_CASE("max_pool2d: 2x2 stride 2, hand values and arg-max") {
  Context ctx = Context::cpu();
  Tensor x = iota({1, 1, 4, 4}, 1), y = Tensor::empty({1, 1, 2, 2});
  Tensor am = Tensor::empty({1, 1, 2, 2}, DType::i32);
  ops::max_pool2d_forward(ctx, y, am, x, pool_params(2, 2, 0));
  check_close(y, {6, 8, 14, 16});
  check_close(am, {5, 7, 13, 15});
}

TEST_CASE("max_pool2d: ceil_mode keeps the partial last window") {
  Context ctx = Context::cpu();
  Tensor x = iota({1, 1, 5, 5}, 0), y = Tensor::empty({1, 1, 3, 3});
  Tensor am = Tensor::empty({1, 1, 3, 3}, DType::i32);
  ops::max_pool2d_forward(ctx, y, am, x, pool_params(2, 2, 0, true));
  check_close(y, {6, 8, 9, 16, 18, 19, 21, 23, 24});
  check_close(am, {6, 8, 9, 16, 18, 19, 21, 23, 24});
  // Without ceil_mode the output is 2x2, and a 3x3 y is rejected.
  CHECK_THROWS_WITH_AS(ops::max_pool2d_forward(ctx, y, am, x, pool_params(2, 2, 0, false)),
                       doctest::Contains("y has shape (1, 1, 3, 3), expected (1, 1, 2, 2)"), Error);
}

TEST_CASE("max_pool2d: padding never wins (it is -inf), ties go to the first maximum") {
  Context ctx = Context::cpu();
  Tensor x = iota({1, 1, 4, 4}, -1, -1), y = Tensor::empty({1, 1, 2, 2});
  Tensor am = Tensor::empty({1, 1, 2, 2}, DType::i32);
  ops::max_pool2d_forward(ctx, y, am, x, pool_params(3, 2, 1));
  check_close(y, {-1, -2, -5, -6});
  check_close(am, {0, 1, 4, 5});

  Tensor t = Tensor::from({1, 1, 2, 4}, {3, 5, 7, 7, 5, 1, 7, 7});
  Tensor ty = Tensor::empty({1, 1, 1, 2}), tam = Tensor::empty({1, 1, 1, 2}, DType::i32);
  ops::max_pool2d_forward(ctx, ty, tam, t, pool_params(2, 2, 0));
  check_close(ty, {5, 7});
  check_close(tam, {1, 2});
}

TEST_CASE("max_pool2d_backward: gradient goes to the arg-max, accumulating") {
  Context ctx = Context::cpu();
  // Overlapping windows (3x3, stride 1) share maxima, whose gradients add up.
  Tensor x = iota({1, 1, 4, 4}, 1), y = Tensor::empty({1, 1, 2, 2});
  Tensor am = Tensor::empty({1, 1, 2, 2}, DType::i32);
  ops::max_pool2d_forward(ctx, y, am, x, pool_params(3, 1, 0));
  check_close(am, {10, 11, 14, 15});
  Tensor dy = Tensor::from({1, 1, 2, 2}, {1, 2, 3, 4}), dx = Tensor::zeros({1, 1, 4, 4});
  ops::max_pool2d_backward(ctx, dx, dy, am, pool_params(3, 1, 0), ops::DxMode::add);
  ops::max_pool2d_backward(ctx, dx, dy, am, pool_params(3, 1, 0), ops::DxMode::add);
  std::vector<double> want(16, 0);
  want[10] = 2, want[11] = 4, want[14] = 6, want[15] = 8;
  check_close(dx, want);
  Tensor bad = Tensor::empty({1, 1, 2, 2}, DType::i32);
  std::fill(bad.data<int32_t>(), bad.data<int32_t>() + 4, 16);
  CHECK_THROWS_WITH_AS(ops::max_pool2d_backward(ctx, dx, dy, bad, pool_params(3, 1, 0), ops::DxMode::add),
                       doctest::Contains("argmax 16 at element 0 is outside a 4x4 plane"), Error);
  // dy must be dx pooled with the forward's parameters: other parameters are refused by name.
  CHECK_THROWS_WITH_AS(ops::max_pool2d_backward(ctx, dx, dy, am, pool_params(4, 1, 0), ops::DxMode::add),
                       doctest::Contains("max_pool2d_backward: dy"), Error);
}

TEST_CASE("max_pool2d: forward and backward against plain loops, with padding and ceil_mode") {
  Context ctx = Context::cpu(2);
  for (const ops::Pool2dParams& p :
       {pool_params(3, 2, 1), pool_params(2, 2, 0, true), pool_params(3, 2, 1, true), pool_params(5, 3, 2, true)}) {
    CAPTURE(p.kernel_h);
    CAPTURE(p.ceil_mode);
    Tensor x = randn({2, 3, 9, 8}, 5);
    const int64_t H = 9, W = 8;
    const int64_t OH = ops::conv_out_size(H, p.kernel_h, p.stride_h, p.pad_h, 1, p.ceil_mode);
    const int64_t OW = ops::conv_out_size(W, p.kernel_w, p.stride_w, p.pad_w, 1, p.ceil_mode);
    Tensor y = Tensor::empty({2, 3, OH, OW}), am = Tensor::empty({2, 3, OH, OW}, DType::i32);
    ops::max_pool2d_forward(ctx, y, am, x, p);
    Tensor dy = randn(y.shape(), 6), dx = Tensor::zeros(x.shape());
    ops::max_pool2d_backward(ctx, dx, dy, am, p, ops::DxMode::add);
    Context rctx = Context::cpu();
    Tensor want_y = Tensor::empty(y.shape()), want_am = Tensor::empty(y.shape(), DType::i32);
    Tensor want_dx = Tensor::zeros(x.shape());
    ref::max_pool2d_forward(rctx, want_y, want_am, x, p);
    ref::max_pool2d_backward(rctx, want_dx, dy, want_am, p, ops::DxMode::add);
    check_close(y, want_y, 0);
    check_close(am, want_am, 0);
    check_close(dx, want_dx);
  }
}

// Under --precision bf16|fp16 a max pool between an activated map and a convolution takes and
// gives half-precision maps (ops.def, "half-precision maps"; on the host through widened copies,
// the contract tests/cuda/test_precision.cpp holds the CUDA kernel to). Rounding is monotone, so
// pooling the rounded map gives the rounded fp32 maximum bit for bit, whichever of x and y is
// half; only the argmax may move, to the first of values that round alike.
TEST_CASE("half-precision maps: a max pool of a bf16/fp16 map is the fp32 maximum rounded") {
  for_each_half_host_case([&](Context& ctx, DType half, bool channels_last) {
    ops::Pool2dParams p = pool_params(3, 2, 1, /*ceil_mode=*/true);
    p.format = channels_last ? ops::MemoryFormat::channels_last : ops::MemoryFormat::contiguous;
    const Shape x_shape = channels_last ? Shape{2, 9, 8, 3} : Shape{2, 3, 9, 8};
    const Shape y_shape = channels_last ? Shape{2, 5, 5, 3} : Shape{2, 3, 5, 5};
    const Tensor x = randn(x_shape, 81), xh = x.cast(half);
    Tensor y32 = Tensor::empty(y_shape), am32 = Tensor::empty(y_shape, DType::i32);
    ops::max_pool2d_forward(ctx, y32, am32, x, p);
    // fp32 in, half out: the fp32 maximum rounded, at the same place.
    Tensor yh = Tensor::empty(y_shape, half), am = Tensor::empty(y_shape, DType::i32);
    ops::max_pool2d_forward(ctx, yh, am, x, p);
    CHECK(bitwise_equal(yh, y32.cast(half)));
    CHECK(bitwise_equal(am, am32));
    // Half in, half out: the same bits again; the argmax is the fp32 pool's of the widened map.
    Tensor yhh = Tensor::empty(y_shape, half), amh = Tensor::empty(y_shape, DType::i32);
    ops::max_pool2d_forward(ctx, yhh, amh, xh, p);
    CHECK(bitwise_equal(yhh, y32.cast(half)));
    Tensor yw = Tensor::empty(y_shape), amw = Tensor::empty(y_shape, DType::i32);
    ops::max_pool2d_forward(ctx, yw, amw, xh.cast(DType::f32), p);
    CHECK(bitwise_equal(amh, amw));
    // Half in, fp32 out: the widened maximum.
    Tensor yf = Tensor::empty(y_shape), amf = Tensor::empty(y_shape, DType::i32);
    ops::max_pool2d_forward(ctx, yf, amf, xh, p);
    CHECK(bitwise_equal(yf, yw));
  });
  // Two values that round alike tie: the first wins, where fp32's larger second one did.
  Context ctx = Context::cpu();
  ctx.compute = DType::bf16;
  const Tensor x = Tensor::from({1, 1, 2, 2}, {1.f, 1.f + 0x1p-12f, 0.f, 0.f});
  Tensor y = Tensor::empty({1, 1, 1, 1}, DType::bf16), am = Tensor::empty({1, 1, 1, 1}, DType::i32);
  ops::max_pool2d_forward(ctx, y, am, x.cast(DType::bf16), pool_params(2, 2, 0));
  check_close(y.cast(DType::f32), {1});
  check_close(am, {0});
  ops::max_pool2d_forward(ctx, y, am, x, pool_params(2, 2, 0));
  check_close(am, {1});
  // A half map needs half compute, and that compute's type.
  Context plain = Context::cpu();
  CHECK_THROWS_WITH_AS(ops::max_pool2d_forward(plain, y, am, x, pool_params(2, 2, 0)),
                       doctest::Contains("max_pool2d_forward: y (1, 1, 1, 1) must be f32 (half-precision maps need "
                                         "--precision bf16 or fp16), got bf16"),
                       Error);
  ctx.compute = DType::f16;
  CHECK_THROWS_WITH_AS(ops::max_pool2d_forward(ctx, y, am, x.cast(DType::bf16), pool_params(2, 2, 0)),
                       doctest::Contains("max_pool2d_forward: x (1, 1, 2, 2) must be f32 or f16"), Error);
}

// Its backward may take a half dy (the gradient of the convolution after the pool, cuDNN's half
// result) and write a half dx, written over (the gradient of a ReLU after a convolution before
// the pool): the fp32 op on the widened dy, its sums rounded once at the store. Overlapping
// windows (3x3, stride 2) make some elements sums of two or four gradients.
TEST_CASE("half-precision maps: a max pool's backward from a bf16/fp16 dy into a bf16/fp16 dx") {
  for_each_half_host_case([&](Context& ctx, DType half, bool channels_last) {
    ops::Pool2dParams p = pool_params(3, 2, 1, /*ceil_mode=*/true);
    p.format = channels_last ? ops::MemoryFormat::channels_last : ops::MemoryFormat::contiguous;
    const Shape x_shape = channels_last ? Shape{2, 9, 8, 3} : Shape{2, 3, 9, 8};
    const Shape y_shape = channels_last ? Shape{2, 5, 5, 3} : Shape{2, 3, 5, 5};
    Tensor y = Tensor::empty(y_shape), am = Tensor::empty(y_shape, DType::i32);
    ops::max_pool2d_forward(ctx, y, am, randn(x_shape, 82), p);
    const Tensor dyh = randn(y_shape, 83).cast(half), dyw = dyh.cast(DType::f32);
    Tensor want = Tensor::empty(x_shape);
    ops::max_pool2d_backward(ctx, want, dyw, am, p, ops::DxMode::overwrite);
    // Half dy, fp32 dx (written over and added into): the widened dy's.
    Tensor dx = Tensor::empty(x_shape);
    ops::max_pool2d_backward(ctx, dx, dyh, am, p, ops::DxMode::overwrite);
    CHECK(bitwise_equal(dx, want));
    const Tensor held = randn(x_shape, 84);
    Tensor sum = held.clone(), sum_w = held.clone();
    ops::max_pool2d_backward(ctx, sum, dyh, am, p, ops::DxMode::add);
    ops::max_pool2d_backward(ctx, sum_w, dyw, am, p, ops::DxMode::add);
    CHECK(bitwise_equal(sum, sum_w));
    // Half dx from a half or an fp32 dy: the fp32 dx rounded (NaN-poisoned first: all written).
    for (const Tensor* g : {&dyh, &dyw}) {
      Tensor dxh = poisoned(x_shape).cast(half);
      ops::max_pool2d_backward(ctx, dxh, *g, am, p, ops::DxMode::overwrite);
      CHECK(bitwise_equal(dxh, want.cast(half)));
    }
  });
  Context ctx = Context::cpu();
  ctx.compute = DType::bf16;
  const ops::Pool2dParams p = pool_params(2, 2, 0);
  Tensor y = Tensor::empty({1, 1, 1, 1}), am = Tensor::empty({1, 1, 1, 1}, DType::i32);
  ops::max_pool2d_forward(ctx, y, am, randn({1, 1, 2, 2}, 85), p);
  // A half dx is written over, never added to; a half map needs half compute, and its type.
  Tensor dxh = Tensor::empty({1, 1, 2, 2}, DType::bf16), dx = Tensor::empty({1, 1, 2, 2});
  const Tensor dy = randn({1, 1, 1, 1}, 86);
  CHECK_THROWS_WITH_AS(ops::max_pool2d_backward(ctx, dxh, dy, am, p, ops::DxMode::add),
                       doctest::Contains("max_pool2d_backward: a bf16 dx is written over (DxMode::overwrite), never "
                                         "added to"),
                       Error);
  Context plain = Context::cpu();
  CHECK_THROWS_WITH_AS(ops::max_pool2d_backward(plain, dx, dy.cast(DType::bf16), am, p, ops::DxMode::overwrite),
                       doctest::Contains("max_pool2d_backward: dy (1, 1, 1, 1) must be f32 (half-precision maps need "
                                         "--precision bf16 or fp16), got bf16"),
                       Error);
  ctx.compute = DType::f16;
  CHECK_THROWS_WITH_AS(ops::max_pool2d_backward(ctx, dxh, dy, am, p, ops::DxMode::overwrite),
                       doctest::Contains("max_pool2d_backward: dx (1, 1, 2, 2) must be f32 or f16"), Error);
}

TEST_CASE("avg_pool2d: hand values with padding, count_include_pad on and off") {
  Context ctx = Context::cpu();
  Tensor x = iota({1, 1, 4, 4}, 1), y = Tensor::empty({1, 1, 2, 2});
  ops::avg_pool2d_forward(ctx, y, x, pool_params(2, 2, 0));
  check_close(y, {3.5, 5.5, 11.5, 13.5});
  // 3x3 windows, stride 2, padding 1: sums 14, 30, 57, 99 over 4, 6, 6, 9 real elements.
  ops::avg_pool2d_forward(ctx, y, x, pool_params(3, 2, 1, false, true));
  check_close(y, {14 / 9., 30 / 9., 57 / 9., 99 / 9.});
  ops::avg_pool2d_forward(ctx, y, x, pool_params(3, 2, 1, false, false));
  check_close(y, {14 / 4., 30 / 6., 57 / 6., 99 / 9.});
}

TEST_CASE("avg_pool2d: ceil_mode windows past the edge divide by what they cover") {
  Context ctx = Context::cpu();
  Tensor x = iota({1, 1, 5, 5}, 0), y = Tensor::empty({1, 1, 3, 3});
  ops::avg_pool2d_forward(ctx, y, x, pool_params(2, 2, 0, true));
  // The last row and column of windows cover one input row / column only (PyTorch divides
  // by the part inside the padded input, here no padding).
  check_close(y, {3, 5, 6.5, 13, 15, 16.5, 20.5, 22.5, 24});
}

TEST_CASE("avg_pool2d: forward and backward against plain loops, accumulating") {
  Context ctx = Context::cpu(2);
  for (const ops::Pool2dParams& p :
       {pool_params(3, 2, 1, false, true), pool_params(3, 2, 1, true, false), pool_params(2, 2, 0, true, true),
        pool_params(3, 1, 1, false, false), pool_params(5, 3, 2, true, true)}) {
    CAPTURE(p.kernel_h);
    CAPTURE(p.ceil_mode);
    Tensor x = randn({2, 3, 9, 8}, 1);
    const int64_t OH = ops::conv_out_size(9, p.kernel_h, p.stride_h, p.pad_h, 1, p.ceil_mode);
    const int64_t OW = ops::conv_out_size(8, p.kernel_w, p.stride_w, p.pad_w, 1, p.ceil_mode);
    Tensor y = Tensor::empty({2, 3, OH, OW}), dy = randn({2, 3, OH, OW}, 2);
    std::vector<double> ry, rdx;
    avg_reference(x, dy, p, ry, rdx);
    ops::avg_pool2d_forward(ctx, y, x, p);
    check_close(y, ry);
    Tensor dx = Tensor::zeros(x.shape());
    ops::avg_pool2d_backward(ctx, dx, dy, p, ops::DxMode::add);
    check_close(dx, rdx);
    ops::avg_pool2d_backward(ctx, dx, dy, p, ops::DxMode::add);
    for (double& v : rdx) v *= 2;
    check_close(dx, rdx);
  }
}

TEST_CASE("adaptive_avg_pool2d: 5x7 to 3x4 with PyTorch bins floor(iH/OH) to ceil((i+1)H/OH)") {
  Context ctx = Context::cpu();
  Tensor x = iota({1, 1, 5, 7}, 0), y = Tensor::empty({1, 1, 3, 4});
  ops::adaptive_avg_pool2d_forward(ctx, y, x);
  // Row bins [0,2) [1,4) [3,5); column bins [0,2) [1,4) [3,6) [5,7). The mean of an iota
  // block is the value at its centre: 7 * row_centre + column_centre.
  const double rows[] = {0.5, 2, 3.5}, cols[] = {0.5, 2, 4, 5.5};
  std::vector<double> want;
  for (double r : rows)
    for (double c : cols) want.push_back(7 * r + c);
  check_close(y, want);

  // Backward: each input gets dy / bin area from every bin that covers it.
  Tensor dy = Tensor::empty({1, 1, 3, 4});
  ops::fill(ctx, dy, 1.f);
  Tensor dx = Tensor::zeros({1, 1, 5, 7});
  ops::adaptive_avg_pool2d_backward(ctx, dx, dy, ops::DxMode::add);
  const int64_t rb[3][2] = {{0, 2}, {1, 4}, {3, 5}}, cb[4][2] = {{0, 2}, {1, 4}, {3, 6}, {5, 7}};
  std::vector<double> want_dx(35, 0);
  for (auto& r : rb)
    for (auto& c : cb)
      for (int64_t h = r[0]; h < r[1]; ++h)
        for (int64_t w = c[0]; w < c[1]; ++w)
          want_dx[h * 7 + w] += 1.0 / ((r[1] - r[0]) * (c[1] - c[0]));
  check_close(dx, want_dx);
}

TEST_CASE("adaptive_avg_pool2d: global pooling and upsampling-size outputs") {
  Context ctx = Context::cpu(2);
  Tensor x = randn({2, 3, 7, 7}, 3), y = Tensor::empty({2, 3, 1, 1});
  ops::adaptive_avg_pool2d_forward(ctx, y, x);
  auto xv = x.to_vector();
  std::vector<double> means(6, 0);
  for (int64_t i = 0; i < x.numel(); ++i) means[i / 49] += xv[i] / 49.0;
  check_close(y, means);
  // Output larger than the input: every bin is one element, some repeated.
  Tensor small = iota({1, 1, 2, 2}, 1), big = Tensor::empty({1, 1, 3, 3});
  ops::adaptive_avg_pool2d_forward(ctx, big, small);
  check_close(big, {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4});
}

TEST_CASE("adaptive_avg_pool2d: a global pool over a 112x112 map is the mean correctly rounded") {
  // EfficientNet's first squeeze-excitation pools 12,544 positive values per channel: a float
  // running sum is 5e-7 off here, enough to fail agreement with torchvision at 1e-4 on real images.
  Context ctx = Context::cpu(2);
  const int64_t n = 112 * 112;
  std::vector<float> v(static_cast<size_t>(2 * n));
  for (int64_t i = 0; i < 2 * n; ++i) v[i] = 0.1f + 0.37f * static_cast<float>((i * 7919) % 1000) / 1000.f;
  Tensor x = Tensor::from({1, 2, 112, 112}, v), y = Tensor::empty({1, 2, 1, 1});
  ops::adaptive_avg_pool2d_forward(ctx, y, x);
  for (int c = 0; c < 2; ++c) {
    const double mean = dpx::testing::moments(std::span<const float>(v).subspan(c * n, n)).mean;
    CAPTURE(c);
    CHECK(y.to_vector()[c] == static_cast<float>(mean));
  }
}

TEST_CASE("pooling: bad windows are clear errors") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::zeros({1, 1, 4, 4}), y = Tensor::empty({1, 1, 3, 3});
  CHECK_THROWS_WITH_AS(ops::avg_pool2d_forward(ctx, y, x, pool_params(2, 2, 2)),
                       doctest::Contains("padding (2, 2) must be at most half the kernel"), Error);
  Tensor am = Tensor::empty({1, 1, 2, 2}), y2 = Tensor::empty({1, 1, 2, 2});
  CHECK_THROWS_WITH_AS(ops::max_pool2d_forward(ctx, y2, am, x, pool_params(2, 2, 0)),
                       doctest::Contains("argmax (1, 1, 2, 2) must be i32, got f32"), Error);
}

TEST_CASE("max pool: the vectorised interior and the borders agree with the reference bit for bit") {
  // Kernels 2, 3 and 5, strides 1 to 3, padding 0 to 2, ceil_mode on and off, odd and even
  // widths (some whose windows all touch a border); NaNs and ties in the input: the first maximum
  // in row-major order wins and a NaN is the maximum, as in PyTorch.
  struct P {
    int k, s, pad;
    bool ceil;
    int64_t H, W;
  };
  for (const P& c : {P{3, 2, 0, true, 13, 111}, P{3, 2, 1, false, 12, 56}, P{2, 2, 0, false, 9, 9},
                     P{3, 1, 1, false, 7, 40}, P{5, 3, 2, true, 11, 23}, P{3, 2, 1, true, 4, 3},
                     P{5, 1, 2, false, 6, 5}}) {
    CAPTURE(c.k);
    CAPTURE(c.s);
    CAPTURE(c.pad);
    CAPTURE(c.ceil);
    CAPTURE(c.W);
    const ops::Pool2dParams p = pool_params(c.k, c.s, c.pad, c.ceil);
    Tensor x = randn({2, 3, c.H, c.W}, 21);
    float* xp = x.data<float>();
    for (int64_t i = 0; i < x.numel(); i += 7) xp[i] = xp[i + 1 < x.numel() ? i + 1 : i];  // ties
    for (int64_t i = 5; i < x.numel(); i += 61) xp[i] = std::nanf("");
    const int64_t OH = ops::conv_out_size(c.H, c.k, c.s, c.pad, 1, c.ceil);
    const int64_t OW = ops::conv_out_size(c.W, c.k, c.s, c.pad, 1, c.ceil);
    Context ctx = Context::cpu(2);
    Tensor y = Tensor::empty({2, 3, OH, OW}), am = Tensor::empty({2, 3, OH, OW}, DType::i32);
    Tensor ry = Tensor::empty({2, 3, OH, OW}), ram = Tensor::empty({2, 3, OH, OW}, DType::i32);
    ops::max_pool2d_forward(ctx, y, am, x, p);
    ref::max_pool2d_forward(ctx, ry, ram, x, p);
    CHECK(dpx::testing::bitwise_equal(y, ry));
    CHECK(dpx::testing::bitwise_equal(am, ram));
  }
}
