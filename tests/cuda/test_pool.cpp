// GPU tests of the pooling kernels against the CPU ops: max pooling (values and arg-max exactly
// equal, ties included), average pooling (count_include_pad, ceil_mode, padding) and adaptive
// average pooling (uneven bins, upsampling), forward and accumulating backward.
#include <doctest/doctest.h>

#include <vector>

#include "tests/cuda/gpu_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

ops::Pool2dParams pool(int kh, int kw, int sh, int sw, int ph, int pw, bool ceil_mode, bool include_pad = true) {
  ops::Pool2dParams p;
  p.kernel_h = kh;
  p.kernel_w = kw;
  p.stride_h = sh;
  p.stride_w = sw;
  p.pad_h = ph;
  p.pad_w = pw;
  p.ceil_mode = ceil_mode;
  p.count_include_pad = include_pad;
  return p;
}

std::vector<ops::Pool2dParams> windows() {
  return {pool(3, 3, 2, 2, 1, 1, false),  pool(3, 3, 2, 2, 1, 1, true),  pool(2, 2, 2, 2, 0, 0, true),
          pool(3, 3, 1, 1, 0, 0, false),  pool(3, 2, 2, 1, 1, 0, true),  pool(5, 5, 3, 3, 2, 2, true),
          pool(3, 3, 2, 2, 1, 1, true, false), pool(2, 3, 3, 2, 1, 1, false, false)};
}

Shape pooled(const Shape& x, const ops::Pool2dParams& p) {
  return {x[0], x[1], ops::conv_out_size(x[2], p.kernel_h, p.stride_h, p.pad_h, 1, p.ceil_mode),
          ops::conv_out_size(x[3], p.kernel_w, p.stride_w, p.pad_w, 1, p.ceil_mode)};
}

}  // namespace

TEST_CASE("cuda max_pool2d: values, arg-max and the accumulated or written-over backward equal the reference's bit for bit") {
  Context c = reference(), g = gpu();
  const Shape xs{3, 5, 13, 13};
  // Values on a coarse grid produce many ties: the first maximum must win on both devices.
  Tensor x = uniform(xs, 1, -4.f, 4.f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(static_cast<int>(x.data<float>()[i]));
  uint64_t seed = 10;
  for (const auto& p : windows()) {
    CAPTURE(p.kernel_h);
    CAPTURE(p.stride_h);
    CAPTURE(p.pad_h);
    CAPTURE(p.ceil_mode);
    Shape ys = pooled(xs, p);
    Tensor y = Tensor::empty(ys), am = Tensor::empty(ys, DType::i32);
    Tensor gy = poisoned(ys, dev()), gam = Tensor::empty(ys, DType::i32, dev());
    ops::max_pool2d_forward(c, y, am, x, p);
    ops::max_pool2d_forward(g, gy, gam, x.to(dev()), p);
    CHECK(bitwise_equal(gy, y));
    CHECK(bitwise_equal(gam, am));
    Tensor dy = uniform(ys, ++seed), dx0 = uniform(xs, ++seed);
    Tensor dx = dx0.clone(), gdx = dx0.to(dev());
    ops::max_pool2d_backward(c, dx, dy, am, p, ops::DxMode::add);
    ops::max_pool2d_backward(g, gdx, dy.to(dev()), gam, p, ops::DxMode::add);
    // The GPU gathers each input's outputs in the reference's order, from dx: the same bits.
    CHECK(bitwise_equal(gdx, dx));
    // Written over (DxMode::overwrite): from 0, never reading what dx held.
    Tensor over = poisoned(xs), gover = poisoned(xs, dev());
    ops::max_pool2d_backward(c, over, dy, am, p, ops::DxMode::overwrite);
    ops::max_pool2d_backward(g, gover, dy.to(dev()), gam, p, ops::DxMode::overwrite);
    CHECK(bitwise_equal(gover, over));
  }
}

TEST_CASE("cuda avg_pool2d forward and backward match the reference") {
  Context c = reference(), g = gpu();
  const Shape xs{3, 5, 13, 13};
  Tensor x = uniform(xs, 2);
  uint64_t seed = 30;
  for (const auto& p : windows()) {
    CAPTURE(p.kernel_h);
    CAPTURE(p.stride_h);
    CAPTURE(p.pad_h);
    CAPTURE(p.ceil_mode);
    CAPTURE(p.count_include_pad);
    Shape ys = pooled(xs, p);
    Tensor y = Tensor::empty(ys), gy = poisoned(ys, dev());
    ops::avg_pool2d_forward(c, y, x, p);
    ops::avg_pool2d_forward(g, gy, x.to(dev()), p);
    check_close(gy, y, 1e-5);
    Tensor dy = uniform(ys, ++seed), dx0 = uniform(xs, ++seed);
    Tensor dx = dx0.clone(), gdx = dx0.to(dev());
    ops::avg_pool2d_backward(c, dx, dy, p, ops::DxMode::add);
    ops::avg_pool2d_backward(g, gdx, dy.to(dev()), p, ops::DxMode::add);
    check_close(gdx, dx, 1e-5);
    // Written over (DxMode::overwrite): what adding into zeros gives on the GPU, bit for bit.
    Tensor gzero = Tensor::zeros(xs).to(dev()), gover = poisoned(xs, dev());
    ops::avg_pool2d_backward(g, gzero, dy.to(dev()), p, ops::DxMode::add);
    ops::avg_pool2d_backward(g, gover, dy.to(dev()), p, ops::DxMode::overwrite);
    CHECK(bitwise_equal(gover, gzero));
  }
}

TEST_CASE("cuda adaptive_avg_pool2d forward and backward match the reference") {
  Context c = reference(), g = gpu();
  struct Sizes { int64_t h, w, oh, ow; };
  uint64_t seed = 50;
  // 1x1 outputs take the global-average kernels (a warp per map): maps of 1, 63, 169, 289 and
  // 12,544 values; backward by a flat loop below a block's worth of values, a block row per map
  // above it (289 a float at a time, 12,544 in float4s).
  for (Sizes s : {Sizes{13, 13, 5, 3}, Sizes{13, 13, 1, 1}, Sizes{7, 7, 7, 7}, Sizes{3, 3, 5, 5}, Sizes{13, 11, 6, 4},
                  Sizes{1, 1, 1, 1}, Sizes{7, 9, 1, 1}, Sizes{17, 17, 1, 1}, Sizes{112, 112, 1, 1}}) {
    CAPTURE(s.h);
    CAPTURE(s.oh);
    CAPTURE(s.ow);
    Shape xs{3, 5, s.h, s.w}, ys{3, 5, s.oh, s.ow};
    Tensor x = uniform(xs, ++seed);
    Tensor y = Tensor::empty(ys), gy = poisoned(ys, dev());
    ops::adaptive_avg_pool2d_forward(c, y, x);
    ops::adaptive_avg_pool2d_forward(g, gy, x.to(dev()));
    check_close(gy, y, 1e-5);
    Tensor dy = uniform(ys, ++seed), dx0 = uniform(xs, ++seed);
    Tensor dx = dx0.clone(), gdx = dx0.to(dev());
    ops::adaptive_avg_pool2d_backward(c, dx, dy, ops::DxMode::add);
    ops::adaptive_avg_pool2d_backward(g, gdx, dy.to(dev()), ops::DxMode::add);
    check_close(gdx, dx, 1e-5);
    // Written over (DxMode::overwrite; the global kernels' flat and per-plane paths too): what
    // adding into zeros gives on the GPU, bit for bit.
    Tensor gzero = Tensor::zeros(xs).to(dev()), gover = poisoned(xs, dev());
    ops::adaptive_avg_pool2d_backward(g, gzero, dy.to(dev()), ops::DxMode::add);
    ops::adaptive_avg_pool2d_backward(g, gover, dy.to(dev()), ops::DxMode::overwrite);
    CHECK(bitwise_equal(gover, gzero));
  }
}
