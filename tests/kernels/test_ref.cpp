// Tests of every CPU kernel (through dpx::ops on a 2-thread CPU context) against the plain-loop
// reference kernels of kernels/ref/, on random inputs: odd sizes, groups and depthwise, strides,
// padding, dilation, ceil_mode, label smoothing. Outputs start as NaN (forward ops overwrite);
// gradients start nonzero (backward ops add), and null gradients are left alone.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/ref/ref_ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/kernels/kernel_params.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::conv_params;
using dpx::testing::pool_params;
using dpx::testing::labels_from;
using dpx::testing::poisoned;  // outputs start as NaN: an element a kernel does not write stays NaN
using dpx::testing::randn;

namespace {

// Tolerances relative to max(|a|, |b|, 1). Short computations (elementwise, a few dozen terms)
// round within a few f32 ulps; the CPU kernels sum long reductions (GEMM, conv dW over every
// image and pixel, 1000-class rows) in f32 and in another order than the double reference,
// so those errors grow like sqrt(terms) * 6e-8 and get kLong.
constexpr double kShort = 1e-5;
constexpr double kLong = 1e-4;

Context cpu() { return Context::cpu(2); }
Context one() { return Context::cpu(1); }

// A gradient pre-filled with nonzero values, twice: the CPU kernel adds into `cpu`, the
// reference into `ref`.
struct Grad {
  Tensor cpu, ref;
};
Grad grad(const Shape& shape, uint64_t seed) {
  Tensor g = randn(shape, seed);
  return {g, g.clone()};
}

void close(const char* what, const Tensor& got, const Tensor& want, double tol = kShort) {
  const double d = dpx::testing::max_rel_diff(got.to_vector(), want.to_vector());
  CHECK_MESSAGE(d <= tol, std::string(what), ": CPU and reference differ by ", d, " (tolerance ", tol, ")");
}
void close(const char* what, const Grad& g, double tol = kShort) { close(what, g.cpu, g.ref, tol); }

}  // namespace

TEST_CASE("ref: fill, copy, add, axpy, scale, count_nonfinite") {
  Context c = cpu(), r = one();
  // 40000 elements: above the size from which the CPU kernels split over threads.
  for (int64_t n : {1, 37, 40000}) {
    CAPTURE(n);
    Tensor a = randn({n}, 1), b = randn({n}, 2);
    Tensor oc = poisoned({n}), orf = poisoned({n});
    ops::fill(c, oc, 2.5f), ref::fill(r, orf, 2.5f);
    close("fill", oc, orf, 0);
    ops::copy(c, oc, a), ref::copy(r, orf, a);
    close("copy", oc, orf, 0);
    Tensor li = labels_from(std::vector<int64_t>(n, 7)), lc = Tensor::zeros({n}, DType::i64),
           lr = Tensor::zeros({n}, DType::i64);
    ops::copy(c, lc, li), ref::copy(r, lr, li);
    CHECK(bitwise_equal(lc, lr));
    ops::add(c, oc, a, b), ref::add(r, orf, a, b);
    close("add", oc, orf, 0);
    ops::axpy(c, oc, -0.75f, b), ref::axpy(r, orf, -0.75f, b);
    close("axpy", oc, orf, 0);
    ops::scale(c, oc, 3.f), ref::scale(r, orf, 3.f);
    close("scale", oc, orf, 0);
    float* p = a.data<float>();
    p[n / 2] = std::numeric_limits<float>::quiet_NaN();
    p[n - 1] = -std::numeric_limits<float>::infinity();
    p[0] = std::numeric_limits<float>::infinity();
    CHECK(ops::count_nonfinite(c, a) == ref::count_nonfinite(r, a));
    CHECK(ref::count_nonfinite(r, a) == (n == 1 ? 1 : 3));
  }
}

TEST_CASE("ref: linear forward and backward, with and without bias, null gradients") {
  Context c = cpu(), r = one();
  struct Case {
    int64_t N, in, out;
  };
  for (Case k : {Case{1, 1, 1}, Case{3, 5, 7}, Case{17, 33, 9}, Case{64, 300, 130}}) {
    CAPTURE(k.N); CAPTURE(k.in); CAPTURE(k.out);
    // kLong: the largest case sums 300 products per output in f32 (Eigen) vs double.
    const double tol = k.in * k.N > 1000 ? kLong : kShort;
    Tensor x = randn({k.N, k.in}, 1), w = randn({k.out, k.in}, 2), b = randn({k.out}, 3);
    Tensor dy = randn({k.N, k.out}, 4);
    for (const Tensor* bias : std::initializer_list<const Tensor*>{&b, nullptr}) {
      Tensor yc = poisoned({k.N, k.out}), yr = poisoned({k.N, k.out});
      ops::linear_forward(c, yc, x, w, bias), ref::linear_forward(r, yr, x, w, bias);
      close("linear y", yc, yr, tol);
    }
    Grad dx = grad(x.shape(), 5), dw = grad(w.shape(), 6), db = grad(b.shape(), 7);
    ops::linear_backward(c, &dx.cpu, &dw.cpu, &db.cpu, dy, x, w);
    ref::linear_backward(r, &dx.ref, &dw.ref, &db.ref, dy, x, w);
    close("linear dx", dx, tol), close("linear dw", dw, tol), close("linear db", db, tol);
    ops::linear_backward(c, nullptr, &dw.cpu, nullptr, dy, x, w);
    ref::linear_backward(r, nullptr, &dw.ref, nullptr, dy, x, w);
    close("linear dw alone", dw, tol);
  }
}

TEST_CASE("ref: batched matmul, every transpose, alpha and beta") {
  Context c = cpu(), r = one();
  struct Case {
    Shape lead;
    int64_t M, N, K;
  };
  for (const Case& k : {Case{{}, 5, 7, 3}, Case{{3}, 1, 9, 4}, Case{{2, 3}, 6, 5, 11}, Case{{2}, 150, 130, 70}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [alpha, beta] : {std::pair{1.f, 0.f}, std::pair{0.5f, 1.f}, std::pair{-2.f, 0.25f}}) {
          CAPTURE(k.M); CAPTURE(ta); CAPTURE(tb); CAPTURE(alpha); CAPTURE(beta);
          auto shape = [&](int64_t rows, int64_t cols) {
            Shape s = k.lead;
            s.push_back(rows), s.push_back(cols);
            return s;
          };
          Tensor a = randn(ta ? shape(k.K, k.M) : shape(k.M, k.K), 1);
          Tensor b = randn(tb ? shape(k.N, k.K) : shape(k.K, k.N), 2);
          // beta == 0 must not read c: start from NaN then.
          Tensor cc = beta == 0.f ? poisoned(shape(k.M, k.N)) : randn(shape(k.M, k.N), 3);
          Tensor cr = cc.clone();
          ops::matmul(c, cc, a, b, ta, tb, alpha, beta), ref::matmul(r, cr, a, b, ta, tb, alpha, beta);
          close("matmul", cc, cr, k.K > 20 ? kLong : kShort);  // 70 f32 products for the last
        }
}

namespace {

struct ConvCase {
  int64_t N, C, H, W, K, kh, kw;
  ops::Conv2dParams p;
};

void check_conv(const ConvCase& k, double tol) {
  CAPTURE(k.N); CAPTURE(k.C); CAPTURE(k.H); CAPTURE(k.W); CAPTURE(k.K); CAPTURE(k.kh); CAPTURE(k.kw);
  CAPTURE(k.p.stride_h); CAPTURE(k.p.pad_h); CAPTURE(k.p.dilation_h); CAPTURE(k.p.groups);
  Context c = cpu(), r = one();
  const int64_t OH = ops::conv_out_size(k.H, int(k.kh), k.p.stride_h, k.p.pad_h, k.p.dilation_h);
  const int64_t OW = ops::conv_out_size(k.W, int(k.kw), k.p.stride_w, k.p.pad_w, k.p.dilation_w);
  Tensor x = randn({k.N, k.C, k.H, k.W}, 1), w = randn({k.K, k.C / k.p.groups, k.kh, k.kw}, 2, 0.3f);
  Tensor b = randn({k.K}, 3), dy = randn({k.N, k.K, OH, OW}, 4);
  for (const Tensor* bias : std::initializer_list<const Tensor*>{&b, nullptr}) {
    Tensor yc = poisoned(dy.shape()), yr = poisoned(dy.shape());
    ops::conv2d_forward(c, yc, x, w, bias, k.p), ref::conv2d_forward(r, yr, x, w, bias, k.p);
    close("conv y", yc, yr, tol);
  }
  Grad dx = grad(x.shape(), 5), dw = grad(w.shape(), 6), db = grad(b.shape(), 7);
  ops::conv2d_backward(c, &dx.cpu, &dw.cpu, &db.cpu, dy, x, w, k.p, ops::DxMode::add);
  ref::conv2d_backward(r, &dx.ref, &dw.ref, &db.ref, dy, x, w, k.p, ops::DxMode::add);
  close("conv dx", dx, tol), close("conv dw", dw, tol), close("conv db", db, tol);
  // Each gradient alone (the others null) adds the same again.
  ops::conv2d_backward(c, &dx.cpu, nullptr, nullptr, dy, x, w, k.p, ops::DxMode::add);
  ref::conv2d_backward(r, &dx.ref, nullptr, nullptr, dy, x, w, k.p, ops::DxMode::add);
  ops::conv2d_backward(c, nullptr, &dw.cpu, nullptr, dy, x, w, k.p, ops::DxMode::add);
  ref::conv2d_backward(r, nullptr, &dw.ref, nullptr, dy, x, w, k.p, ops::DxMode::add);
  ops::conv2d_backward(c, nullptr, nullptr, &db.cpu, dy, x, w, k.p, ops::DxMode::add);
  ref::conv2d_backward(r, nullptr, nullptr, &db.ref, dy, x, w, k.p, ops::DxMode::add);
  close("conv dx twice", dx, tol), close("conv dw twice", dw, tol), close("conv db twice", db, tol);
  // DxMode::overwrite: dx's old contents (poison) are written over.
  Tensor dxc = poisoned(x.shape()), dxr = poisoned(x.shape());
  ops::conv2d_backward(c, &dxc, nullptr, nullptr, dy, x, w, k.p, ops::DxMode::overwrite);
  ref::conv2d_backward(r, &dxr, nullptr, nullptr, dy, x, w, k.p, ops::DxMode::overwrite);
  close("conv dx written over", dxc, dxr, tol);
}

}  // namespace

TEST_CASE("ref: conv2d, forward and backward, strides, padding, dilation, groups") {
  check_conv({2, 3, 7, 9, 4, 3, 3, conv_params(1, 1, 1, 1)}, kShort);    // odd sizes, 3x3 "same"
  check_conv({2, 4, 7, 6, 6, 3, 3, conv_params(2, 1, 1, 2)}, kShort);    // stride 2, 2 groups
  check_conv({2, 3, 10, 11, 4, 3, 3, conv_params(1, 2, 2, 1)}, kShort);  // dilation 2
  check_conv({3, 5, 4, 6, 3, 1, 1, conv_params(1, 0, 1, 1)}, kShort);    // 1x1 (x is the column matrix)
  check_conv({2, 5, 5, 5, 3, 1, 1, conv_params(2, 0, 1, 1)}, kShort);    // 1x1 stride 2
  check_conv({1, 3, 29, 27, 8, 7, 7, conv_params(2, 3, 1, 1)}, kLong);   // a 7x7/2 stem: 147-term sums
  check_conv({2, 2, 3, 3, 2, 3, 3, conv_params(1, 0, 1, 1)}, kShort);    // kernel as large as the image
  ConvCase rect{2, 3, 8, 9, 4, 3, 2, conv_params(1, 2, 2, 1)};         // non-square everything
  rect.p.stride_w = 2, rect.p.pad_w = 1, rect.p.dilation_w = 3;
  check_conv(rect, kShort);
}

TEST_CASE("ref: conv2d depthwise (its own CPU kernel) and the batched small-image path") {
  // dW of a depthwise kernel sums up to N * OH * OW products in f32: kLong.
  check_conv({2, 6, 9, 8, 6, 3, 3, conv_params(1, 1, 1, 6)}, kLong);      // depthwise
  check_conv({2, 4, 9, 10, 8, 5, 5, conv_params(2, 2, 1, 4)}, kLong);     // multiplier 2, 5x5 stride 2
  check_conv({3, 3, 12, 13, 3, 7, 7, conv_params(1, 3, 1, 3)}, kLong);    // 7x7 depthwise
  check_conv({2, 5, 15, 12, 5, 3, 3, conv_params(2, 2, 2, 5)}, kLong);    // dilation 2, stride 2
  check_conv({8, 64, 3, 3, 48, 3, 3, conv_params(1, 1, 1, 2)}, kLong);    // several images per GEMM
  check_conv({2, 16, 30, 30, 4, 3, 3, conv_params(1, 1, 1, 1)}, kLong);   // several column tiles
}

TEST_CASE("ref: max and average pooling, padding, ceil_mode, count_include_pad") {
  Context c = cpu(), r = one();
  struct Case {
    Shape x;
    ops::Pool2dParams p;
  };
  ops::Pool2dParams rect = pool_params(3, 2, 1);
  rect.kernel_w = 2, rect.stride_w = 1, rect.pad_w = 0;
  for (bool include_pad : {true, false})
    for (const Case& k : {Case{{2, 3, 7, 7}, pool_params(3, 2, 1, false, include_pad)},  // ResNet's stem pool
                          Case{{2, 3, 8, 9}, pool_params(2, 2, 0, false, include_pad)},
                          Case{{1, 2, 6, 7}, pool_params(3, 2, 0, true, include_pad)},   // SqueezeNet's
                          Case{{1, 2, 2, 2}, pool_params(3, 2, 0, true, include_pad)},   // window > input
                          Case{{2, 2, 8, 8}, pool_params(3, 2, 1, true, include_pad)},   // last window clipped
                          Case{{2, 2, 9, 7}, pool_params(3, 1, 1, false, include_pad)},  // overlapping
                          Case{{1, 3, 7, 5}, rect}}) {
      CAPTURE(shape_str(k.x)); CAPTURE(k.p.kernel_h); CAPTURE(k.p.stride_h); CAPTURE(k.p.pad_h);
      CAPTURE(k.p.ceil_mode); CAPTURE(k.p.count_include_pad);
      const int64_t OH = ops::conv_out_size(k.x[2], k.p.kernel_h, k.p.stride_h, k.p.pad_h, 1, k.p.ceil_mode);
      const int64_t OW = ops::conv_out_size(k.x[3], k.p.kernel_w, k.p.stride_w, k.p.pad_w, 1, k.p.ceil_mode);
      const Shape ys{k.x[0], k.x[1], OH, OW};
      Tensor x = randn(k.x, 1), dy = randn(ys, 2);
      // Ties, a NaN and -inf: the first maximum wins, a NaN wins over numbers.
      x.data<float>()[1] = x.data<float>()[0];
      x.data<float>()[x.numel() / 2] = std::numeric_limits<float>::quiet_NaN();
      x.data<float>()[x.numel() - 1] = -std::numeric_limits<float>::infinity();
      Tensor yc = poisoned(ys), yr = poisoned(ys);
      Tensor ac = Tensor::zeros(ys, DType::i32), ar = Tensor::zeros(ys, DType::i32);
      ops::max_pool2d_forward(c, yc, ac, x, k.p), ref::max_pool2d_forward(r, yr, ar, x, k.p);
      close("max y", yc, yr, 0);
      CHECK(bitwise_equal(ac, ar));
      Grad dx = grad(k.x, 3);
      ops::max_pool2d_backward(c, dx.cpu, dy, ac, k.p), ref::max_pool2d_backward(r, dx.ref, dy, ar, k.p);
      close("max dx", dx);

      Tensor xf = randn(k.x, 4);  // average pooling without the NaN
      ops::avg_pool2d_forward(c, yc, xf, k.p), ref::avg_pool2d_forward(r, yr, xf, k.p);
      close("avg y", yc, yr);
      ops::avg_pool2d_backward(c, dx.cpu, dy, k.p), ref::avg_pool2d_backward(r, dx.ref, dy, k.p);
      close("avg dx", dx);
    }
}

TEST_CASE("ref: adaptive average pooling, bins that do not divide, upsampling, global") {
  Context c = cpu(), r = one();
  for (auto [xs, oh, ow] : {std::tuple{Shape{2, 3, 7, 9}, 1, 1}, std::tuple{Shape{2, 3, 7, 9}, 3, 5},
                            std::tuple{Shape{2, 3, 7, 9}, 7, 9}, std::tuple{Shape{1, 2, 3, 3}, 5, 4},
                            std::tuple{Shape{2, 4, 56, 56}, 1, 1}}) {
    CAPTURE(shape_str(xs)); CAPTURE(oh); CAPTURE(ow);
    const Shape ys{xs[0], xs[1], oh, ow};
    Tensor x = randn(xs, 1), dy = randn(ys, 2), yc = poisoned(ys), yr = poisoned(ys);
    ops::adaptive_avg_pool2d_forward(c, yc, x), ref::adaptive_avg_pool2d_forward(r, yr, x);
    close("adaptive y", yc, yr);
    Grad dx = grad(xs, 3);
    ops::adaptive_avg_pool2d_backward(c, dx.cpu, dy), ref::adaptive_avg_pool2d_backward(r, dx.ref, dy);
    close("adaptive dx", dx);
  }
}

TEST_CASE("ref: batch norm, training and eval forward, backward, null gradients") {
  Context c = cpu(), r = one();
  for (const Shape& xs : {Shape{4, 3}, Shape{3, 2, 5}, Shape{2, 3, 5, 7}, Shape{8, 16, 14, 14}}) {
    CAPTURE(shape_str(xs));
    const int64_t C = xs[1];
    Tensor x = randn(xs, 1, 2.f), gamma = randn({C}, 2), beta = randn({C}, 3), dy = randn(xs, 4);
    // Shifted away from 0, so the mean matters.
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += 3.f;
    Tensor rm = randn({C}, 5), rv = randn({C}, 6);
    for (int64_t i = 0; i < C; ++i) rv.data<float>()[i] = 0.5f + std::fabs(rv.data<float>()[i]);
    Tensor rmc = rm.clone(), rvc = rv.clone(), rmr = rm.clone(), rvr = rv.clone();
    Tensor yc = poisoned(xs), yr = poisoned(xs), mc = poisoned({C}), mr = poisoned({C}), ic = poisoned({C}),
           ir = poisoned({C});
    ops::batch_norm_forward_train(c, yc, mc, ic, rmc, rvc, x, gamma, beta, 0.1f, 1e-5f, ops::Epilogue::none);
    ref::batch_norm_forward_train(r, yr, mr, ir, rmr, rvr, x, gamma, beta, 0.1f, 1e-5f, ops::Epilogue::none);
    close("bn y", yc, yr), close("bn mean", mc, mr), close("bn invstd", ic, ir);
    close("bn running_mean", rmc, rmr), close("bn running_var", rvc, rvr);

    ops::batch_norm_forward_eval(c, yc, x, gamma, beta, rm, rv, 1e-5f, ops::Epilogue::none);
    ref::batch_norm_forward_eval(r, yr, x, gamma, beta, rm, rv, 1e-5f, ops::Epilogue::none);
    close("bn eval y", yc, yr);

    Grad dx = grad(xs, 7), dg = grad({C}, 8), db = grad({C}, 9);
    ops::batch_norm_backward(c, &dx.cpu, &dg.cpu, &db.cpu, dy, x, gamma, mr, ir, ops::DxMode::add, nullptr);
    ref::batch_norm_backward(r, &dx.ref, &dg.ref, &db.ref, dy, x, gamma, mr, ir, ops::DxMode::add, nullptr);
    close("bn dx", dx), close("bn dgamma", dg), close("bn dbeta", db);
    ops::batch_norm_backward(c, nullptr, &dg.cpu, nullptr, dy, x, gamma, mr, ir, ops::DxMode::add, nullptr);
    ref::batch_norm_backward(r, nullptr, &dg.ref, nullptr, dy, x, gamma, mr, ir, ops::DxMode::add, nullptr);
    ops::batch_norm_backward(c, &dx.cpu, nullptr, nullptr, dy, x, gamma, mr, ir, ops::DxMode::add, nullptr);
    ref::batch_norm_backward(r, &dx.ref, nullptr, nullptr, dy, x, gamma, mr, ir, ops::DxMode::add, nullptr);
    close("bn dx alone", dx), close("bn dgamma alone", dg), close("bn dbeta untouched", db);
    Tensor dxc = poisoned(xs), dxr = poisoned(xs);
    ops::batch_norm_backward(c, &dxc, nullptr, nullptr, dy, x, gamma, mr, ir, ops::DxMode::overwrite, nullptr);
    ref::batch_norm_backward(r, &dxr, nullptr, nullptr, dy, x, gamma, mr, ir, ops::DxMode::overwrite, nullptr);
    close("bn dx written over", dxc, dxr);
  }
}

TEST_CASE("ref: relu, sigmoid, silu, gelu, forward and backward") {
  Context c = cpu(), r = one();
  for (int64_t n : {1, 37, 40000}) {
    CAPTURE(n);
    Tensor x = randn({n}, 1, 3.f), dy = randn({n}, 2);
    x.data<float>()[0] = 0.f;  // ReLU's kink
    Tensor yc = poisoned({n}), yr = poisoned({n});
    Grad dx = grad({n}, 3);
    ops::relu_forward(c, yc, x), ref::relu_forward(r, yr, x);
    close("relu y", yc, yr, 0);
    ops::relu_backward(c, dx.cpu, dy, yc, ops::DxMode::add), ref::relu_backward(r, dx.ref, dy, yr, ops::DxMode::add);
    close("relu dx", dx, 0);
    ops::relu_backward(c, dx.cpu, dy, yc, ops::DxMode::overwrite);
    ref::relu_backward(r, dx.ref, dy, yr, ops::DxMode::overwrite);
    close("relu dx written over", dx, 0);
    ops::sigmoid_forward(c, yc, x), ref::sigmoid_forward(r, yr, x);
    close("sigmoid y", yc, yr);
    ops::sigmoid_backward(c, dx.cpu, dy, yc, ops::DxMode::add), ref::sigmoid_backward(r, dx.ref, dy, yr, ops::DxMode::add);
    close("sigmoid dx", dx);
    ops::sigmoid_backward(c, dx.cpu, dy, yc, ops::DxMode::overwrite);
    ref::sigmoid_backward(r, dx.ref, dy, yr, ops::DxMode::overwrite);
    close("sigmoid dx written over", dx);
    ops::silu_forward(c, yc, x), ref::silu_forward(r, yr, x);
    close("silu y", yc, yr);
    ops::silu_backward(c, dx.cpu, dy, x, ops::DxMode::add), ref::silu_backward(r, dx.ref, dy, x, ops::DxMode::add);
    close("silu dx", dx);
    ops::silu_backward(c, dx.cpu, dy, x, ops::DxMode::overwrite);
    ref::silu_backward(r, dx.ref, dy, x, ops::DxMode::overwrite);
    close("silu dx written over", dx);
    ops::gelu_forward(c, yc, x), ref::gelu_forward(r, yr, x);
    close("gelu y", yc, yr);
    ops::gelu_backward(c, dx.cpu, dy, x, ops::DxMode::add), ref::gelu_backward(r, dx.ref, dy, x, ops::DxMode::add);
    close("gelu dx", dx);
    ops::gelu_backward(c, dx.cpu, dy, x, ops::DxMode::overwrite);
    ref::gelu_backward(r, dx.ref, dy, x, ops::DxMode::overwrite);
    close("gelu dx written over", dx);
  }
}

TEST_CASE("ref: dropout draws the same mask bit from the same Rng counter") {
  Context c = cpu(), r = one();
  for (float p : {0.f, 0.3f, 0.9f, 1.f})
    for (int64_t n : {1, 37, 40000}) {
      CAPTURE(p); CAPTURE(n);
      Tensor x = randn({n}, 1), dy = randn({n}, 2), yc = poisoned({n}), yr = poisoned({n});
      Tensor mc = Tensor::zeros({n}, DType::u8), mr = Tensor::zeros({n}, DType::u8);
      ops::dropout_forward(c, yc, mc, x, p, 1234, 5), ref::dropout_forward(r, yr, mr, x, p, 1234, 5);
      CHECK(bitwise_equal(mc, mr));
      close("dropout y", yc, yr, 0);
      Grad dx = grad({n}, 3);
      ops::dropout_backward(c, dx.cpu, dy, mc, p), ref::dropout_backward(r, dx.ref, dy, mr, p);
      // dx += dy * s: the compiler may fuse it into one multiply-add in one kernel and not in
      // the other (-march=native), a difference of one rounding.
      close("dropout dx", dx);
      if (n == 40000) {  // the mask is not trivially all kept or all dropped
        int64_t kept = 0;
        for (int64_t i = 0; i < n; ++i) kept += mr.data<uint8_t>()[i];
        CHECK(std::fabs(double(kept) / n - (1.0 - p)) < 0.02);
      }
    }
}

TEST_CASE("ref: broadcast add and multiply, forward and backward, null gradients") {
  Context c = cpu(), r = one();
  for (auto [out, as, bs] : {std::tuple{Shape{2, 3, 4, 5}, Shape{2, 3, 4, 5}, Shape{2, 3, 1, 1}},  // SE
                             std::tuple{Shape{3, 2, 2, 4}, Shape{3, 2, 2, 4}, Shape{3, 1, 1, 1}},  // drop path
                             std::tuple{Shape{3, 2, 5, 5}, Shape{1, 2, 5, 5}, Shape{3, 1, 5, 5}},  // Swin
                             std::tuple{Shape{2, 3, 4}, Shape{1, 3, 1}, Shape{2, 1, 4}},
                             std::tuple{Shape{4, 1, 3, 2, 2, 3}, Shape{4, 1, 1, 2, 1, 3}, Shape{1, 1, 3, 1, 2, 1}},
                             std::tuple{Shape{1, 1}, Shape{1, 1}, Shape{1, 1}},
                             std::tuple{Shape{64, 700}, Shape{64, 700}, Shape{1, 700}}}) {
    CAPTURE(shape_str(out)); CAPTURE(shape_str(as)); CAPTURE(shape_str(bs));
    Tensor a = randn(as, 1), b = randn(bs, 2), dy = randn(out, 3);
    Tensor oc = poisoned(out), orf = poisoned(out);
    ops::add_broadcast(c, oc, a, b), ref::add_broadcast(r, orf, a, b);
    close("add_broadcast", oc, orf, 0);
    ops::mul_broadcast(c, oc, a, b), ref::mul_broadcast(r, orf, a, b);
    close("mul_broadcast", oc, orf, 0);
    Grad da = grad(as, 4), db = grad(bs, 5);
    ops::add_broadcast_backward(c, &da.cpu, &db.cpu, dy), ref::add_broadcast_backward(r, &da.ref, &db.ref, dy);
    close("add da", da), close("add db", db);
    ops::mul_broadcast_backward(c, &da.cpu, &db.cpu, dy, a, b);
    ref::mul_broadcast_backward(r, &da.ref, &db.ref, dy, a, b);
    close("mul da", da), close("mul db", db);
    ops::mul_broadcast_backward(c, nullptr, &db.cpu, dy, a, b);
    ref::mul_broadcast_backward(r, nullptr, &db.ref, dy, a, b);
    close("mul db alone", db);
  }
}

TEST_CASE("ref: layer norm forward and backward, null gradients") {
  Context c = cpu(), r = one();
  for (const Shape& xs : {Shape{5, 7}, Shape{2, 3, 16}, Shape{4, 1}, Shape{3, 49, 96}}) {
    CAPTURE(shape_str(xs));
    const int64_t D = xs.back(), rows = shape_numel(xs) / D;
    Tensor x = randn(xs, 1, 2.f), gamma = randn({D}, 2), beta = randn({D}, 3), dy = randn(xs, 4);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += 1.5f;
    Tensor yc = poisoned(xs), yr = poisoned(xs), mc = poisoned({rows}), mr = poisoned({rows}),
           sc = poisoned({rows}), sr = poisoned({rows});
    ops::layer_norm_forward(c, yc, mc, sc, x, gamma, beta, 1e-5f);
    ref::layer_norm_forward(r, yr, mr, sr, x, gamma, beta, 1e-5f);
    close("ln y", yc, yr), close("ln mean", mc, mr), close("ln rstd", sc, sr);
    Grad dx = grad(xs, 5), dg = grad({D}, 6), db = grad({D}, 7);
    ops::layer_norm_backward(c, &dx.cpu, &dg.cpu, &db.cpu, dy, x, gamma, mr, sr);
    ref::layer_norm_backward(r, &dx.ref, &dg.ref, &db.ref, dy, x, gamma, mr, sr);
    close("ln dx", dx), close("ln dgamma", dg), close("ln dbeta", db);
    ops::layer_norm_backward(c, nullptr, nullptr, &db.cpu, dy, x, gamma, mr, sr);
    ref::layer_norm_backward(r, nullptr, nullptr, &db.ref, dy, x, gamma, mr, sr);
    close("ln dbeta alone", db), close("ln dgamma untouched", dg);
  }
}

TEST_CASE("ref: softmax with and without a broadcast bias, and its backward") {
  Context c = cpu(), r = one();
  for (auto [xs, bs] : {std::pair{Shape{3, 7}, Shape{}}, std::pair{Shape{5, 1}, Shape{1}},
                        std::pair{Shape{2, 3, 5, 5}, Shape{3, 5, 5}}, std::pair{Shape{2, 3, 5, 5}, Shape{5, 5}},
                        std::pair{Shape{4, 1000}, Shape{1000}}}) {
    CAPTURE(shape_str(xs)); CAPTURE(shape_str(bs));
    Tensor x = randn(xs, 1, 3.f), dy = randn(xs, 2), yc = poisoned(xs), yr = poisoned(xs);
    Tensor bias = bs.empty() ? Tensor() : randn(bs, 3);
    const Tensor* bp = bs.empty() ? nullptr : &bias;
    ops::softmax_forward(c, yc, x, bp), ref::softmax_forward(r, yr, x, bp);
    close("softmax y", yc, yr);
    Grad dx = grad(xs, 4);
    ops::softmax_backward(c, dx.cpu, dy, yr), ref::softmax_backward(r, dx.ref, dy, yr);
    close("softmax dx", dx);
  }
}

TEST_CASE("ref: permute, roll, pad_hw, forward and backward") {
  Context c = cpu(), r = one();
  for (auto [in, perm] : {std::pair{Shape{2, 3, 4, 5}, std::vector<int>{0, 2, 3, 1}},
                          std::pair{Shape{2, 3, 4, 5}, std::vector<int>{3, 1, 2, 0}},
                          std::pair{Shape{7, 9}, std::vector<int>{1, 0}},
                          std::pair{Shape{2, 1, 3, 2, 2, 3}, std::vector<int>{5, 4, 3, 2, 1, 0}},
                          std::pair{Shape{2, 3, 2, 3, 2, 4}, std::vector<int>{0, 1, 3, 2, 4, 5}}}) {
    CAPTURE(shape_str(in));
    Shape out;
    for (int d : perm) out.push_back(in[d]);
    Tensor x = randn(in, 1), dy = randn(out, 2), oc = poisoned(out), orf = poisoned(out);
    ops::permute(c, oc, x, perm), ref::permute(r, orf, x, perm);
    close("permute", oc, orf, 0);
    Grad dx = grad(in, 3);
    ops::permute_backward(c, dx.cpu, dy, perm, ops::DxMode::add), ref::permute_backward(r, dx.ref, dy, perm, ops::DxMode::add);
    close("permute backward", dx, 0);
    ops::permute_backward(c, dx.cpu, dy, perm, ops::DxMode::overwrite);
    ref::permute_backward(r, dx.ref, dy, perm, ops::DxMode::overwrite);
    close("permute backward written over", dx, 0);
  }
  const Shape s{2, 5, 7, 3};
  Tensor x = randn(s, 4), dy = randn(s, 5);
  for (auto [sh, sw] : {std::pair<int64_t, int64_t>{1, 2}, {-3, 5}, {0, 0}, {7, -9}, {-12, 14}}) {
    CAPTURE(sh); CAPTURE(sw);
    Tensor oc = poisoned(s), orf = poisoned(s);
    ops::roll(c, oc, x, sh, sw), ref::roll(r, orf, x, sh, sw);
    close("roll", oc, orf, 0);
    Grad dx = grad(s, 6);
    ops::roll_backward(c, dx.cpu, dy, sh, sw), ref::roll_backward(r, dx.ref, dy, sh, sw);
    close("roll backward", dx, 0);
  }
  for (const Shape& padded : {Shape{2, 5, 7, 3}, Shape{2, 8, 7, 3}, Shape{2, 5, 10, 3}, Shape{2, 7, 9, 3}}) {
    CAPTURE(shape_str(padded));
    Tensor oc = poisoned(padded), orf = poisoned(padded), g = randn(padded, 7);
    ops::pad_hw(c, oc, x), ref::pad_hw(r, orf, x);
    close("pad_hw", oc, orf, 0);
    Grad dx = grad(s, 8);
    ops::pad_hw_backward(c, dx.cpu, g), ref::pad_hw_backward(r, dx.ref, g);
    close("pad_hw backward", dx, 0);
  }
}

TEST_CASE("ref: concat_channels and split_channels_backward") {
  Context c = cpu(), r = one();
  for (const std::vector<Shape>& parts :
       {std::vector<Shape>{{2, 3, 4, 5}, {2, 1, 4, 5}, {2, 5, 4, 5}}, std::vector<Shape>{{3, 2}, {3, 7}},
        std::vector<Shape>{{1, 4, 3}}}) {
    std::vector<Tensor> inputs;
    Shape out = parts[0];
    out[1] = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      inputs.push_back(randn(parts[i], 1 + i));
      out[1] += parts[i][1];
    }
    CAPTURE(shape_str(out));
    Tensor oc = poisoned(out), orf = poisoned(out), dy = randn(out, 9);
    ops::concat_channels(c, oc, inputs), ref::concat_channels(r, orf, inputs);
    close("concat", oc, orf, 0);
    std::vector<Grad> grads;
    for (size_t i = 0; i < parts.size(); ++i) grads.push_back(grad(parts[i], 10 + i));
    std::vector<Tensor*> gc, gr;
    for (Grad& g : grads) gc.push_back(&g.cpu), gr.push_back(&g.ref);
    ops::split_channels_backward(c, gc, dy), ref::split_channels_backward(r, gr, dy);
    for (const Grad& g : grads) close("split", g, 0);
  }
}

TEST_CASE("ref: index_select and its scatter-add backward with repeated indices") {
  Context c = cpu(), r = one();
  Tensor table = randn({10, 6}, 1), dout = randn({15, 6}, 2);
  Tensor index = labels_from({3, 0, 9, 3, 3, 5, 1, 9, 0, 2, 8, 7, 7, 4, 6});
  Tensor oc = poisoned({15, 6}), orf = poisoned({15, 6});
  ops::index_select(c, oc, table, index), ref::index_select(r, orf, table, index);
  close("index_select", oc, orf, 0);
  Grad dt = grad({10, 6}, 3);
  ops::index_select_backward(c, dt.cpu, dout, index), ref::index_select_backward(r, dt.ref, dout, index);
  close("index_select backward", dt);
}

TEST_CASE("ref: cross-entropy with label smoothing and scale, and count_correct") {
  Context c = cpu(), r = one();
  for (auto [N, C] : {std::pair<int64_t, int64_t>{5, 7}, {8, 1000}, {3, 1}})
    for (float smoothing : {0.f, 0.1f, 1.f}) {
      CAPTURE(N); CAPTURE(C); CAPTURE(smoothing);
      Tensor logits = randn({N, C}, 1, 4.f);
      std::vector<int64_t> lv;
      for (int64_t n = 0; n < N; ++n) lv.push_back((n * 5 + 2) % C);
      Tensor labels = labels_from(lv);
      Tensor lc = poisoned({1}), lr = poisoned({1}), pc = poisoned({N, C}), pr = poisoned({N, C});
      ops::cross_entropy_forward(c, lc, pc, logits, labels, smoothing);
      ref::cross_entropy_forward(r, lr, pr, logits, labels, smoothing);
      close("ce loss", lc, lr), close("ce probs", pc, pr);
      Grad dz = grad({N, C}, 2);
      for (float scale : {1.f, 0.25f}) {
        ops::cross_entropy_backward(c, dz.cpu, pr, labels, smoothing, scale);
        ref::cross_entropy_backward(r, dz.ref, pr, labels, smoothing, scale);
        close("ce dlogits", dz);
      }
      CHECK(ops::count_correct(c, logits, labels) == ref::count_correct(r, logits, labels));
    }
  // Ties: the first maximum is the prediction.
  Tensor tied = Tensor::from({3, 3}, {1, 1, 0, 0, 2, 2, 5, 5, 5});
  for (const auto& lv : {std::vector<int64_t>{0, 1, 0}, std::vector<int64_t>{1, 2, 2}}) {
    Tensor labels = labels_from(lv);
    CHECK(ops::count_correct(c, tied, labels) == ref::count_correct(r, tied, labels));
  }
  CHECK(ref::count_correct(r, tied, labels_from({0, 1, 0})) == 3);
}

TEST_CASE("ref: sgd and adamw steps round exactly as the CPU kernels") {
  Context c = cpu(), r = one();
  const int64_t n = 40037;
  auto sgd = [](float lr, float momentum, float dampening, float wd, bool nesterov) {
    ops::SgdParams p;
    p.lr = lr, p.momentum = momentum, p.dampening = dampening, p.weight_decay = wd, p.nesterov = nesterov;
    return p;
  };
  for (const ops::SgdParams& p : {sgd(0.1f, 0, 0, 0, false), sgd(0.1f, 0, 0, 1e-2f, false),
                                  sgd(0.05f, 0.9f, 0, 5e-4f, false), sgd(0.05f, 0.9f, 0.3f, 0, false),
                                  sgd(0.05f, 0.9f, 0, 1e-4f, true)}) {
    CAPTURE(p.momentum); CAPTURE(p.dampening); CAPTURE(p.weight_decay); CAPTURE(p.nesterov);
    Tensor wc = randn({n}, 1), wr = wc.clone(), bc = poisoned({n}), br = poisoned({n});
    for (int step = 0; step < 3; ++step) {
      Tensor g = randn({n}, 10 + step);
      ops::sgd_step(c, wc, g, bc, p, step == 0), ref::sgd_step(r, wr, g, br, p, step == 0);
    }
    CHECK(bitwise_equal(wc, wr));
    if (p.momentum != 0.f) CHECK(bitwise_equal(bc, br));
  }
  ops::AdamwParams p;
  for (float wd : {0.f, 0.05f}) {
    p.weight_decay = wd;
    Tensor wc = randn({n}, 2), wr = wc.clone();
    Tensor mc = Tensor::zeros({n}), mr = Tensor::zeros({n}), vc = Tensor::zeros({n}), vr = Tensor::zeros({n});
    for (int64_t step = 1; step <= 4; ++step) {
      Tensor g = randn({n}, 20 + step);
      ops::adamw_step(c, wc, g, mc, vc, p, step), ref::adamw_step(r, wr, g, mr, vr, p, step);
    }
    CHECK(bitwise_equal(wc, wr));
    CHECK(bitwise_equal(mc, mr));
    CHECK(bitwise_equal(vc, vr));
  }
}
