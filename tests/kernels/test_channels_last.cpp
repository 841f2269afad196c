// Tests of the channels-last convolution and pooling ops (ops::MemoryFormat::channels_last) on
// the two host backends: each result equals the contiguous op's on the same data, permuted by the
// test's own loop (tests/common/channels_last.hpp), bit for bit — forward values, argmax, and
// every gradient, written over or added into what dx and dw held. Also the shape checks that
// read the channel from the last dimension, and batch norm's row path.
#include <doctest/doctest.h>

#include "kernels/ops.hpp"
#include "tests/common/channels_last.hpp"
#include "tests/common/tensors.hpp"
#include "tests/kernels/kernel_params.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::conv_params;
using dpx::testing::pool_params;
using dpx::testing::poisoned;
using dpx::testing::randn;
using dpx::testing::to_channels_last;

namespace {

constexpr ops::MemoryFormat kLast = ops::MemoryFormat::channels_last;

// The CPU backend and the reference one (ctx.reference): both run channels-last maps.
std::vector<Context> host_backends() {
  Context cpu = Context::cpu(2), ref = Context::cpu(1);
  ref.reference = true;
  return {cpu, ref};
}

template <class P>
P channels_last(P p) {
  p.format = kLast;
  return p;
}

// A convolution of x (N, C, H, W) by w (K, C / groups, kh, kw) in both formats: y, and dx, dw, db
// from dy, with dx written over (NaN before) or added to its values, dw and db added to theirs.
void check_conv(Context& ctx, const Shape& x_shape, const Shape& w_shape, const ops::Conv2dParams& p, bool bias,
                ops::DxMode dx_mode) {
  const Tensor x = randn(x_shape, 1), w = randn(w_shape, 2, 0.3f), b = randn({w_shape[0]}, 3);
  const Shape y_shape = {x_shape[0], w_shape[0],
                         ops::conv_out_size(x_shape[2], int(w_shape[2]), p.stride_h, p.pad_h, p.dilation_h),
                         ops::conv_out_size(x_shape[3], int(w_shape[3]), p.stride_w, p.pad_w, p.dilation_w)};
  Tensor y = Tensor::empty(y_shape);
  ops::conv2d_forward(ctx, y, x, w, bias ? &b : nullptr, p);
  const Tensor dy = randn(y_shape, 4);
  Tensor dx = dx_mode == ops::DxMode::add ? randn(x_shape, 5) : poisoned(x_shape);
  Tensor dw = randn(w_shape, 6), db = randn({w_shape[0]}, 7);
  const Tensor dx_last_in = to_channels_last(dx);  // the same starting values, channels-last
  Tensor dw_last = dw.clone(), db_last = db.clone();
  ops::conv2d_backward(ctx, &dx, &dw, bias ? &db : nullptr, dy, x, w, p, dx_mode);

  const ops::Conv2dParams q = channels_last(p);
  const Tensor x_last = to_channels_last(x);
  Tensor y_last = poisoned(to_channels_last(y).shape());
  ops::conv2d_forward(ctx, y_last, x_last, w, bias ? &b : nullptr, q);
  CHECK(bitwise_equal(y_last, to_channels_last(y)));
  Tensor dx_last = dx_last_in.clone();
  ops::conv2d_backward(ctx, &dx_last, &dw_last, bias ? &db_last : nullptr, to_channels_last(dy), x_last, w, q,
                       dx_mode);
  CHECK(bitwise_equal(dx_last, to_channels_last(dx)));
  CHECK(bitwise_equal(dw_last, dw));
  CHECK(bitwise_equal(db_last, db));
}

}  // namespace

TEST_CASE("conv2d channels_last: values and gradients are the contiguous op's, permuted") {
  for (Context ctx : host_backends()) {
    CAPTURE(ctx.reference);
    // stride, padding, groups and a bias; dx written over
    check_conv(ctx, {2, 4, 7, 6}, {6, 2, 3, 3}, conv_params(2, 1, 1, 2), true, ops::DxMode::overwrite);
    // 1x1 without bias, dx added to
    check_conv(ctx, {3, 5, 4, 4}, {8, 5, 1, 1}, conv_params(1, 0, 1, 1), false, ops::DxMode::add);
    // dilation, a rectangular map, depthwise (groups = C)
    check_conv(ctx, {1, 3, 9, 5}, {3, 1, 3, 3}, conv_params(1, 2, 2, 3), true, ops::DxMode::add);
  }
}

TEST_CASE("max_pool2d channels_last: values, argmax and dx are the contiguous op's, permuted") {
  for (Context ctx : host_backends()) {
    CAPTURE(ctx.reference);
    for (const ops::Pool2dParams& p : {pool_params(3, 2, 1), pool_params(2, 2, 0, true), pool_params(3, 1, 0)}) {
      const Tensor x = randn({2, 5, 7, 6}, 11);
      const Shape y_shape = {2, 5, ops::conv_out_size(7, p.kernel_h, p.stride_h, p.pad_h, 1, p.ceil_mode),
                             ops::conv_out_size(6, p.kernel_w, p.stride_w, p.pad_w, 1, p.ceil_mode)};
      Tensor y = Tensor::empty(y_shape), am = Tensor::empty(y_shape, DType::i32);
      ops::max_pool2d_forward(ctx, y, am, x, p);
      const Tensor dy = randn(y_shape, 12);
      Tensor dx = randn(x.shape(), 13);
      const Tensor dx_last_in = to_channels_last(dx);
      ops::max_pool2d_backward(ctx, dx, dy, am, p, ops::DxMode::add);

      const ops::Pool2dParams q = channels_last(p);
      Tensor y_last = poisoned(to_channels_last(y).shape());
      Tensor am_last = Tensor::zeros(y_last.shape(), DType::i32);
      ops::max_pool2d_forward(ctx, y_last, am_last, to_channels_last(x), q);
      CHECK(bitwise_equal(y_last, to_channels_last(y)));
      CHECK(bitwise_equal(am_last, to_channels_last(am)));  // still h * W + w within the map
      Tensor dx_last = dx_last_in.clone();
      ops::max_pool2d_backward(ctx, dx_last, to_channels_last(dy), am_last, q, ops::DxMode::add);
      CHECK(bitwise_equal(dx_last, to_channels_last(dx)));
      // Written over (DxMode::overwrite), in either layout: what adding into zeros gives, whatever
      // dx held (overlapping windows included).
      Tensor from_zeros = Tensor::zeros(x.shape());
      ops::max_pool2d_backward(ctx, from_zeros, dy, am, p, ops::DxMode::add);
      Tensor over = poisoned(x.shape()), over_last = poisoned(dx_last.shape());
      ops::max_pool2d_backward(ctx, over, dy, am, p, ops::DxMode::overwrite);
      ops::max_pool2d_backward(ctx, over_last, to_channels_last(dy), am_last, q, ops::DxMode::overwrite);
      CHECK(bitwise_equal(over, from_zeros));
      CHECK(bitwise_equal(over_last, to_channels_last(from_zeros)));
    }
  }
}

TEST_CASE("avg_pool2d channels_last: padding, ceil_mode and count_include_pad as the contiguous op, permuted") {
  for (Context ctx : host_backends()) {
    CAPTURE(ctx.reference);
    for (const ops::Pool2dParams& p :
         {pool_params(2, 2, 0), pool_params(3, 2, 1, true), pool_params(3, 2, 1, true, false)}) {
      const Tensor x = randn({2, 5, 7, 6}, 51);
      const Shape y_shape = {2, 5, ops::conv_out_size(7, p.kernel_h, p.stride_h, p.pad_h, 1, p.ceil_mode),
                             ops::conv_out_size(6, p.kernel_w, p.stride_w, p.pad_w, 1, p.ceil_mode)};
      Tensor y = Tensor::empty(y_shape);
      ops::avg_pool2d_forward(ctx, y, x, p);
      const Tensor dy = randn(y_shape, 52);
      Tensor dx = randn(x.shape(), 53);
      const Tensor dx_last_in = to_channels_last(dx);
      ops::avg_pool2d_backward(ctx, dx, dy, p, ops::DxMode::add);

      const ops::Pool2dParams q = channels_last(p);
      Tensor y_last = poisoned(to_channels_last(y).shape());
      ops::avg_pool2d_forward(ctx, y_last, to_channels_last(x), q);
      CHECK(bitwise_equal(y_last, to_channels_last(y)));
      Tensor dx_last = dx_last_in.clone();
      ops::avg_pool2d_backward(ctx, dx_last, to_channels_last(dy), q, ops::DxMode::add);
      CHECK(bitwise_equal(dx_last, to_channels_last(dx)));
      // Written over (DxMode::overwrite), in either layout: what adding into zeros gives.
      Tensor from_zeros = Tensor::zeros(x.shape());
      ops::avg_pool2d_backward(ctx, from_zeros, dy, p, ops::DxMode::add);
      Tensor over = poisoned(x.shape()), over_last = poisoned(dx_last.shape());
      ops::avg_pool2d_backward(ctx, over, dy, p, ops::DxMode::overwrite);
      ops::avg_pool2d_backward(ctx, over_last, to_channels_last(dy), q, ops::DxMode::overwrite);
      CHECK(bitwise_equal(over, from_zeros));
      CHECK(bitwise_equal(over_last, to_channels_last(from_zeros)));
    }
  }
}

TEST_CASE("adaptive_avg_pool2d channels_last: uneven bins and the global pool, forward and backward") {
  for (Context ctx : host_backends()) {
    CAPTURE(ctx.reference);
    for (const Shape& out : {Shape{3, 2}, Shape{1, 1}, Shape{9, 8}}) {
      const Tensor x = randn({2, 4, 7, 5}, 21);
      Tensor y = Tensor::empty({2, 4, out[0], out[1]});
      ops::adaptive_avg_pool2d_forward(ctx, y, x, ops::MemoryFormat::contiguous);
      const Tensor dy = randn(y.shape(), 22);
      Tensor dx = randn(x.shape(), 23);
      const Tensor dx_last_in = to_channels_last(dx);
      ops::adaptive_avg_pool2d_backward(ctx, dx, dy, ops::MemoryFormat::contiguous, ops::DxMode::add);

      Tensor y_last = poisoned(to_channels_last(y).shape());
      ops::adaptive_avg_pool2d_forward(ctx, y_last, to_channels_last(x), kLast);
      CHECK(bitwise_equal(y_last, to_channels_last(y)));
      Tensor dx_last = dx_last_in.clone();
      ops::adaptive_avg_pool2d_backward(ctx, dx_last, to_channels_last(dy), kLast, ops::DxMode::add);
      CHECK(bitwise_equal(dx_last, to_channels_last(dx)));
      // Written over (DxMode::overwrite), in either layout: what adding into zeros gives.
      Tensor from_zeros = Tensor::zeros(x.shape());
      ops::adaptive_avg_pool2d_backward(ctx, from_zeros, dy, ops::MemoryFormat::contiguous, ops::DxMode::add);
      Tensor over = poisoned(x.shape()), over_last = poisoned(dx_last.shape());
      ops::adaptive_avg_pool2d_backward(ctx, over, dy, ops::MemoryFormat::contiguous, ops::DxMode::overwrite);
      ops::adaptive_avg_pool2d_backward(ctx, over_last, to_channels_last(dy), kLast, ops::DxMode::overwrite);
      CHECK(bitwise_equal(over, from_zeros));
      CHECK(bitwise_equal(over_last, to_channels_last(from_zeros)));
    }
  }
}

TEST_CASE("channels_last shape checks read C from the last dimension") {
  Context ctx = Context::cpu(1);
  const Tensor x = randn({1, 6, 6, 4}, 31);  // (N, H, W, C): C = 4
  const Tensor w = randn({8, 4, 3, 3}, 32);
  Tensor y = Tensor::empty({1, 4, 4, 8});
  ops::conv2d_forward(ctx, y, x, w, nullptr, channels_last(conv_params(1, 0, 1, 1)));  // fits
  // Read as contiguous, x has 6 channels: the weight does not fit.
  Tensor y_nchw = Tensor::empty({1, 8, 4, 2});
  CHECK_THROWS_WITH_AS(ops::conv2d_forward(ctx, y_nchw, x, w, nullptr, conv_params(1, 0, 1, 1)),
                       doctest::Contains("(contiguous) and w (8, 4, 3, 3) do not fit"), Error);
  Tensor wrong = Tensor::empty({1, 8, 4, 4});  // the contiguous output shape, given a channels-last op
  CHECK_THROWS_WITH_AS(ops::conv2d_forward(ctx, wrong, x, w, nullptr, channels_last(conv_params(1, 0, 1, 1))),
                       doctest::Contains("conv2d_forward: y"), Error);
  Tensor pooled = Tensor::empty({1, 4, 3, 3});  // the contiguous shape, given a channels-last op
  CHECK_THROWS_WITH_AS(ops::avg_pool2d_forward(ctx, pooled, x, channels_last(pool_params(2, 2, 0))),
                       doctest::Contains("avg_pool2d_forward: y"), Error);
  Tensor bins = Tensor::empty({1, 2, 2, 3});  // 3 channels for x's 4
  CHECK_THROWS_WITH_AS(ops::adaptive_avg_pool2d_forward(ctx, bins, x, kLast),
                       doctest::Contains("(channels_last) must agree on N and C"), Error);
}

TEST_CASE("batch norm on rows (M, C), as a channels-last map is normalised: the row-blocked CPU path equals the "
          "per-channel one bit for bit") {
  // The per-channel path runs where x is wider than y (a prefix of its channels); the rows path
  // where x is exactly (M, C). The same values either way: training forward, statistics, and the
  // backward with and without a ReLU folded in, dx written over and added to.
  Context ctx = Context::cpu(2);
  const int64_t M = 300, C = 37, wide = C + 3;  // C: two blocks of 16 and a partial one
  const Tensor x_wide = randn({M, wide}, 41, 1.f, 2.f);
  Tensor x = Tensor::empty({M, C});
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < C; ++c) x.data<float>()[r * C + c] = x_wide.data<float>()[r * wide + c];
  const Tensor gamma = randn({C}, 42), beta = randn({C}, 43), dy = randn({M, C}, 44), dx_start = randn({M, C}, 49);
  for (ops::Epilogue epilogue : {ops::Epilogue::none, ops::Epilogue::relu}) {
    Tensor y[2], mean[2], invstd[2], rm[2], rv[2], dx[2], dg[2], db[2];
    for (int i = 0; i < 2; ++i) {
      const Tensor& in = i == 0 ? x : x_wide;
      y[i] = Tensor::empty({M, C});
      mean[i] = Tensor::empty({C});
      invstd[i] = Tensor::empty({C});
      rm[i] = randn({C}, 45);
      rv[i] = randn({C}, 46, 0.1f, 1.f);
      ops::batch_norm_forward_train(ctx, y[i], mean[i], invstd[i], rm[i], rv[i], in, gamma, beta, 0.1f, 1e-5f, nullptr,
                                    epilogue);
      dg[i] = randn({C}, 47);
      db[i] = randn({C}, 48);
      Tensor d = randn(in.shape(), 49);  // what dx held: the same values in both, at (r, c < C)
      if (i == 1)
        for (int64_t r = 0; r < M; ++r)
          for (int64_t c = 0; c < C; ++c) d.data<float>()[r * wide + c] = dx_start.data<float>()[r * C + c];
      ops::batch_norm_backward(ctx, &d, &dg[i], &db[i], dy, in, gamma, mean[i], invstd[i], ops::DxMode::add,
                               epilogue == ops::Epilogue::relu ? &y[i] : nullptr, nullptr);
      dx[i] = Tensor::empty({M, C});
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < C; ++c) dx[i].data<float>()[r * C + c] = d.data<float>()[r * in.size(1) + c];
    }
    CHECK(bitwise_equal(y[0], y[1]));
    CHECK(bitwise_equal(mean[0], mean[1]));
    CHECK(bitwise_equal(invstd[0], invstd[1]));
    CHECK(bitwise_equal(rm[0], rm[1]));
    CHECK(bitwise_equal(rv[0], rv[1]));
    CHECK(bitwise_equal(dx[0], dx[1]));
    CHECK(bitwise_equal(dg[0], dg[1]));
    CHECK(bitwise_equal(db[0], db[1]));
  }
}
