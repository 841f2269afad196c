// Every CPU kernel (through dpx::ops on a 2-thread CPU context) against the plain-loop reference
// kernels of kernels/ref/ on random inputs, as a table: one row per op (or family of ops), with
// its cases' input shapes (and parameters), its tolerance and whether its backward is checked;
// one driver runs every row. Outputs start as NaN (forward ops overwrite); gradients start
// nonzero (backward ops add), and null gradients are left alone.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/ref/ref_ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"
#include "tests/kernels/kernel_params.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::conv_params;
using dpx::testing::labels_from;
using dpx::testing::pool_params;
using dpx::testing::poisoned;  // outputs start as NaN: an element a kernel does not write stays NaN
using dpx::testing::randn;

namespace {

// Tolerances relative to max(|a|, |b|, 1). Short computations (elementwise, a few dozen terms)
// round within a few f32 ulps; the CPU kernels sum long reductions (GEMM, conv dW over every
// image and pixel, 1000-class rows) in f32 and in another order than the double reference,
// so those errors grow like sqrt(terms) * 6e-8 and get kLong.
constexpr double kShort = 1e-5;
constexpr double kLong = 1e-4;

// A value of each side: the CPU op's output and the reference op's.
template <typename T>
struct Both {
  T cpu, ref;
};
using Out = Both<Tensor>;

Out poisoned_out(const Shape& shape) { return {poisoned(shape), poisoned(shape)}; }
// A gradient pre-filled with nonzero values, twice: the CPU kernel adds into `cpu`, the
// reference into `ref`.
Out grad(const Shape& shape, uint64_t seed) {
  Tensor g = randn(shape, seed);
  return {g, g.clone()};
}

// An argument as one side sees it: what both share as it is, a Both's own half.
template <typename T>
const T& side(const T& shared, bool) {
  return shared;
}
template <typename T>
T& side(Both<T>& both, bool ref) {
  return ref ? both.ref : both.cpu;
}
template <typename T>
T* side(Both<T>* both, bool ref) {
  return ref ? &both->ref : &both->cpu;
}

// Runs the CPU op (on 2 threads) and the reference op (on 1) on the same inputs, each into its
// own outputs; returns both results.
template <typename Fn, typename... Args>
auto both(Fn cpu_op, Fn ref_op, Args&&... args) {
  Context c = Context::cpu(2), r = Context::cpu(1);
  auto got = cpu_op(c, side(args, false)...);
  auto want = ref_op(r, side(args, true)...);
  return Both<decltype(got)>{got, want};
}
template <typename... P, typename... Args>
void both(void (*cpu_op)(Context&, P...), void (*ref_op)(Context&, P...), Args&&... args) {
  Context c = Context::cpu(2), r = Context::cpu(1);
  cpu_op(c, side(args, false)...);
  ref_op(r, side(args, true)...);
}

// Comparisons of gradients made so far ("conv dx", "roll backward", "split"): what the table's
// `backward` says a row makes.
int gradient_checks = 0;

void close(const char* what, const Tensor& got, const Tensor& want, double tol) {
  const std::string name(what);
  if (name.find(" d") != std::string::npos || name.find("backward") != std::string::npos || name == "split")
    ++gradient_checks;
  const double d = dpx::testing::max_rel_diff(got.to_vector(), want.to_vector());
  CHECK_MESSAGE(d <= tol, std::string(what), ": CPU and reference differ by ", d, " (tolerance ", tol, ")");
}
void close(const char* what, const Out& o, double tol) { close(what, o.cpu, o.ref, tol); }

// ---- one check per row: the calls of its ops, for one case --------------------------------------

struct Case {
  std::vector<Shape> in;  // the inputs' shapes
  double tol = -1;        // this case's tolerance where it is not the row's
};

void elementwise(const Case& k, size_t, double tol) {
  const Shape n = k.in[0];
  Tensor a = randn(n, 1), b = randn(n, 2);
  Out o = poisoned_out(n);
  both(ops::fill, ref::fill, o, 2.5f);
  close("fill", o, tol);
  both(ops::copy, ref::copy, o, a);
  close("copy", o, tol);
  Out l{Tensor::zeros(n, DType::i64), Tensor::zeros(n, DType::i64)};
  both(ops::copy, ref::copy, l, labels_from(std::vector<int64_t>(static_cast<size_t>(n[0]), 7)));
  CHECK(bitwise_equal(l.cpu, l.ref));
  both(ops::add, ref::add, o, a, b);
  close("add", o, tol);
  both(ops::add_relu, ref::add_relu, o, a, b);
  close("add_relu", o, tol);
  both(ops::axpy, ref::axpy, o, -0.75f, b);
  close("axpy", o, tol);
  both(ops::scale, ref::scale, o, 3.f);
  close("scale", o, tol);
  float* p = a.data<float>();
  p[n[0] / 2] = std::numeric_limits<float>::quiet_NaN();
  p[n[0] - 1] = -std::numeric_limits<float>::infinity();
  p[0] = std::numeric_limits<float>::infinity();
  const auto count = both(ops::count_nonfinite, ref::count_nonfinite, a);
  CHECK(count.cpu == count.ref);
  CHECK(count.ref == (n[0] == 1 ? 1 : 3));
  Tensor stale = Tensor::zeros({1}, DType::i64);
  stale.data<int64_t>()[0] = 5;  // overwritten, not added to
  Out into{stale, stale.clone()};
  both(ops::count_nonfinite_into, ref::count_nonfinite_into, into, a);
  CHECK(into.cpu.data<int64_t>()[0] == count.ref);
  CHECK(into.ref.data<int64_t>()[0] == count.ref);
}

void linear(const Case& k, size_t, double tol) {
  const Shape xs = k.in[0], ws = k.in[1];
  const int64_t N = xs[0], out = ws[0];
  Tensor x = randn(xs, 1), w = randn(ws, 2), b = randn({out}, 3), dy = randn({N, out}, 4);
  for (const Tensor* bias : std::initializer_list<const Tensor*>{&b, nullptr}) {
    Out y = poisoned_out({N, out});
    both(ops::linear_forward, ref::linear_forward, y, x, w, bias);
    close("linear y", y, tol);
  }
  Out dx = grad(xs, 5), dw = grad(ws, 6), db = grad({out}, 7);
  both(ops::linear_backward, ref::linear_backward, &dx, &dw, &db, dy, x, w, ops::DxMode::add);
  close("linear dx", dx, tol), close("linear dw", dw, tol), close("linear db", db, tol);
  both(ops::linear_backward, ref::linear_backward, nullptr, &dw, nullptr, dy, x, w, ops::DxMode::add);
  close("linear dw alone", dw, tol);
  Out dxo = poisoned_out(xs);  // written over: its NaN never read
  both(ops::linear_backward, ref::linear_backward, &dxo, nullptr, nullptr, dy, x, w, ops::DxMode::overwrite);
  close("linear dx written over", dxo, tol);
}

void matmul(const Case& k, size_t, double tol) {
  const Shape lead = k.in[0];  // the batch dimensions; k.in[1] is {M, N, K}
  const int64_t M = k.in[1][0], N = k.in[1][1], K = k.in[1][2];
  auto shape = [&](int64_t rows, int64_t cols) {
    Shape s = lead;
    s.push_back(rows), s.push_back(cols);
    return s;
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] : {std::pair{1.f, 0.f}, std::pair{0.5f, 1.f}, std::pair{-2.f, 0.25f}}) {
        CAPTURE(ta); CAPTURE(tb); CAPTURE(alpha); CAPTURE(beta);
        Tensor a = randn(ta ? shape(K, M) : shape(M, K), 1);
        Tensor b = randn(tb ? shape(N, K) : shape(K, N), 2);
        // beta == 0 must not read c: start from NaN then.
        Tensor cc = beta == 0.f ? poisoned(shape(M, N)) : randn(shape(M, N), 3);
        Out cm{cc, cc.clone()};
        both(ops::matmul, ref::matmul, cm, a, b, ta, tb, alpha, beta);
        close("matmul", cm, tol);
      }
}

// Convolutions: the inputs' shapes are x (N, C, H, W) and w (K, C / groups, kh, kw); each case's
// parameters are the Conv2dParams below, in the same order.
std::vector<ops::Conv2dParams> conv_cases_params() {
  ops::Conv2dParams rect = conv_params(1, 2, 2, 1);  // non-square everything
  rect.stride_w = 2, rect.pad_w = 1, rect.dilation_w = 3;
  return {conv_params(1, 1, 1, 1), conv_params(2, 1, 1, 2), conv_params(1, 2, 2, 1), conv_params(1, 0, 1, 1),
          conv_params(2, 0, 1, 1), conv_params(2, 3, 1, 1), conv_params(1, 0, 1, 1), rect,
          // depthwise (its own CPU kernel) and the batched small-image path
          conv_params(1, 1, 1, 6), conv_params(2, 2, 1, 4), conv_params(1, 3, 1, 3), conv_params(2, 2, 2, 5),
          conv_params(1, 1, 1, 2), conv_params(1, 1, 1, 1)};
}

void conv2d(const Case& k, size_t i, double tol) {
  static const std::vector<ops::Conv2dParams> params = conv_cases_params();
  const ops::Conv2dParams& p = params.at(i);
  CAPTURE(p.stride_h); CAPTURE(p.pad_h); CAPTURE(p.dilation_h); CAPTURE(p.groups);
  const Shape xs = k.in[0], ws = k.in[1];
  const int64_t OH = ops::conv_out_size(xs[2], int(ws[2]), p.stride_h, p.pad_h, p.dilation_h);
  const int64_t OW = ops::conv_out_size(xs[3], int(ws[3]), p.stride_w, p.pad_w, p.dilation_w);
  Tensor x = randn(xs, 1), w = randn(ws, 2, 0.3f);
  Tensor b = randn({ws[0]}, 3), dy = randn({xs[0], ws[0], OH, OW}, 4);
  for (const Tensor* bias : std::initializer_list<const Tensor*>{&b, nullptr}) {
    Out y = poisoned_out(dy.shape());
    both(ops::conv2d_forward, ref::conv2d_forward, y, x, w, bias, p);
    close("conv y", y, tol);
  }
  Out dx = grad(xs, 5), dw = grad(ws, 6), db = grad(b.shape(), 7);
  both(ops::conv2d_backward, ref::conv2d_backward, &dx, &dw, &db, dy, x, w, p, ops::DxMode::add);
  close("conv dx", dx, tol), close("conv dw", dw, tol), close("conv db", db, tol);
  // Each gradient alone (the others null) adds the same again.
  both(ops::conv2d_backward, ref::conv2d_backward, &dx, nullptr, nullptr, dy, x, w, p, ops::DxMode::add);
  both(ops::conv2d_backward, ref::conv2d_backward, nullptr, &dw, nullptr, dy, x, w, p, ops::DxMode::add);
  both(ops::conv2d_backward, ref::conv2d_backward, nullptr, nullptr, &db, dy, x, w, p, ops::DxMode::add);
  close("conv dx twice", dx, tol), close("conv dw twice", dw, tol), close("conv db twice", db, tol);
  // DxMode::overwrite: dx's old contents (poison) are written over.
  Out dxo = poisoned_out(xs);
  both(ops::conv2d_backward, ref::conv2d_backward, &dxo, nullptr, nullptr, dy, x, w, p, ops::DxMode::overwrite);
  close("conv dx written over", dxo, tol);
}

// Pooling: the input's shape; each case's window the Pool2dParams below, with and without
// count_include_pad.
void pool2d(const Case& k, size_t i, double tol) {
  ops::Pool2dParams rect = pool_params(3, 2, 1);  // non-square, its count_include_pad true
  rect.kernel_w = 2, rect.stride_w = 1, rect.pad_w = 0;
  const std::vector<ops::Pool2dParams> windows = {
      pool_params(3, 2, 1, false),  // ResNet's stem pool
      pool_params(2, 2, 0, false),  pool_params(3, 2, 0, true),  // SqueezeNet's
      pool_params(3, 2, 0, true),   // window > input
      pool_params(3, 2, 1, true),   // last window clipped
      pool_params(3, 1, 1, false),  // overlapping
      rect};
  for (bool include_pad : {true, false}) {
    ops::Pool2dParams p = windows.at(i);
    if (i + 1 != windows.size()) p.count_include_pad = include_pad;
    CAPTURE(p.kernel_h); CAPTURE(p.stride_h); CAPTURE(p.pad_h); CAPTURE(p.ceil_mode); CAPTURE(p.count_include_pad);
    const Shape xs = k.in[0];
    const int64_t OH = ops::conv_out_size(xs[2], p.kernel_h, p.stride_h, p.pad_h, 1, p.ceil_mode);
    const int64_t OW = ops::conv_out_size(xs[3], p.kernel_w, p.stride_w, p.pad_w, 1, p.ceil_mode);
    const Shape ys{xs[0], xs[1], OH, OW};
    Tensor x = randn(xs, 1), dy = randn(ys, 2);
    // Ties, a NaN and -inf: the first maximum wins, a NaN wins over numbers.
    x.data<float>()[1] = x.data<float>()[0];
    x.data<float>()[x.numel() / 2] = std::numeric_limits<float>::quiet_NaN();
    x.data<float>()[x.numel() - 1] = -std::numeric_limits<float>::infinity();
    Out y = poisoned_out(ys);
    Out arg{Tensor::zeros(ys, DType::i32), Tensor::zeros(ys, DType::i32)};
    both(ops::max_pool2d_forward, ref::max_pool2d_forward, y, arg, x, p);
    close("max y", y, 0);
    CHECK(bitwise_equal(arg.cpu, arg.ref));
    Out dx = grad(xs, 3);
    Context c = Context::cpu(2), r = Context::cpu(1);  // each side's own argmax
    ops::max_pool2d_backward(c, dx.cpu, dy, arg.cpu, p, ops::DxMode::add),
        ref::max_pool2d_backward(r, dx.ref, dy, arg.ref, p, ops::DxMode::add);
    close("max dx", dx, tol);
    Tensor xf = randn(xs, 4);  // average pooling without the NaN
    both(ops::avg_pool2d_forward, ref::avg_pool2d_forward, y, xf, p);
    close("avg y", y, tol);
    both(ops::avg_pool2d_backward, ref::avg_pool2d_backward, dx, dy, p, ops::DxMode::add);
    close("avg dx", dx, tol);
  }
}

void adaptive_avg_pool2d(const Case& k, size_t, double tol) {
  const Shape xs = k.in[0], ys = k.in[1];
  Tensor x = randn(xs, 1), dy = randn(ys, 2);
  Out y = poisoned_out(ys);
  both(ops::adaptive_avg_pool2d_forward, ref::adaptive_avg_pool2d_forward, y, x, ops::MemoryFormat::contiguous);
  close("adaptive y", y, tol);
  Out dx = grad(xs, 3);
  both(ops::adaptive_avg_pool2d_backward, ref::adaptive_avg_pool2d_backward, dx, dy, ops::MemoryFormat::contiguous,
       ops::DxMode::add);
  close("adaptive dx", dx, tol);
}

// x, and y when it has fewer channels (x's first ones: the ops' prefix)
void batch_norm(const Case& k, size_t, double tol) {
  const Shape xs = k.in[0], ys = k.in.size() > 1 ? k.in[1] : xs;
  const int64_t C = ys[1];
  Tensor x = randn(xs, 1, 2.f), gamma = randn({C}, 2), beta = randn({C}, 3), dy = randn(ys, 4);
  // Shifted away from 0, so the mean matters.
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += 3.f;
  Tensor rm = randn({C}, 5), rv = randn({C}, 6);
  for (int64_t i = 0; i < C; ++i) rv.data<float>()[i] = 0.5f + std::fabs(rv.data<float>()[i]);
  Out running_mean{rm.clone(), rm.clone()}, running_var{rv.clone(), rv.clone()};
  Out y = poisoned_out(ys), mean = poisoned_out({C}), invstd = poisoned_out({C});
  Out count{Tensor::zeros({1}, DType::i64), Tensor::zeros({1}, DType::i64)};  // batches_tracked
  both(ops::batch_norm_forward_train, ref::batch_norm_forward_train, y, mean, invstd, running_mean, running_var, x,
       gamma, beta, 0.1f, 1e-5f, &count, ops::Epilogue::none);
  CHECK(count.cpu.data<int64_t>()[0] == 1);
  CHECK(count.ref.data<int64_t>()[0] == 1);
  close("bn y", y, tol), close("bn mean", mean, tol), close("bn invstd", invstd, tol);
  close("bn running_mean", running_mean, tol), close("bn running_var", running_var, tol);
  both(ops::batch_norm_forward_eval, ref::batch_norm_forward_eval, y, x, gamma, beta, rm, rv, 1e-5f,
       ops::Epilogue::none);
  close("bn eval y", y, tol);
  const Tensor& m = mean.ref;  // both sides' backward from the reference's statistics
  const Tensor& s = invstd.ref;
  Out dx = grad(xs, 7), dg = grad({C}, 8), db = grad({C}, 9);
  const Tensor* no_relu = nullptr;
  both(ops::batch_norm_backward, ref::batch_norm_backward, &dx, &dg, &db, dy, x, gamma, m, s, ops::DxMode::add, no_relu,
       no_relu);
  close("bn dx", dx, tol), close("bn dgamma", dg, tol), close("bn dbeta", db, tol);
  both(ops::batch_norm_backward, ref::batch_norm_backward, nullptr, &dg, nullptr, dy, x, gamma, m, s, ops::DxMode::add,
       no_relu, no_relu);
  both(ops::batch_norm_backward, ref::batch_norm_backward, &dx, nullptr, nullptr, dy, x, gamma, m, s, ops::DxMode::add,
       no_relu, no_relu);
  close("bn dx alone", dx, tol), close("bn dgamma alone", dg, tol), close("bn dbeta untouched", db, tol);
  Out dxo = poisoned_out(xs);
  both(ops::batch_norm_backward, ref::batch_norm_backward, &dxo, nullptr, nullptr, dy, x, gamma, m, s,
       ops::DxMode::overwrite, no_relu, no_relu);
  close("bn dx written over", dxo, tol);
  // A SiLU folded in: Epilogue::silu forward, silu_beta backward (y recomputed from x).
  both(ops::batch_norm_forward_train, ref::batch_norm_forward_train, y, mean, invstd, running_mean, running_var, x,
       gamma, beta, 0.1f, 1e-5f, static_cast<Tensor*>(nullptr), ops::Epilogue::silu);
  close("bn silu y", y, tol);
  both(ops::batch_norm_forward_eval, ref::batch_norm_forward_eval, y, x, gamma, beta, rm, rv, 1e-5f,
       ops::Epilogue::silu);
  close("bn eval silu y", y, tol);
  const Tensor* silu_beta = &beta;
  both(ops::batch_norm_backward, ref::batch_norm_backward, &dxo, &dg, &db, dy, x, gamma, m, s, ops::DxMode::overwrite,
       no_relu, silu_beta);
  close("bn silu dx", dxo, tol), close("bn silu dgamma", dg, tol), close("bn silu dbeta", db, tol);
}

void activations(const Case& k, size_t, double tol) {
  const Shape n = k.in[0];
  Tensor x = randn(n, 1, 3.f), dy = randn(n, 2);
  x.data<float>()[0] = 0.f;  // ReLU's kink
  Out y = poisoned_out(n), dx = grad(n, 3);
  both(ops::relu_forward, ref::relu_forward, y, x);
  close("relu y", y, 0);
  Context c = Context::cpu(2), r = Context::cpu(1);  // relu's backward reads each side's own y
  ops::relu_backward(c, dx.cpu, dy, y.cpu, ops::DxMode::add), ref::relu_backward(r, dx.ref, dy, y.ref, ops::DxMode::add);
  close("relu dx", dx, 0);
  ops::relu_backward(c, dx.cpu, dy, y.cpu, ops::DxMode::overwrite);
  ref::relu_backward(r, dx.ref, dy, y.ref, ops::DxMode::overwrite);
  close("relu dx written over", dx, 0);
  both(ops::sigmoid_forward, ref::sigmoid_forward, y, x);
  close("sigmoid y", y, tol);
  ops::sigmoid_backward(c, dx.cpu, dy, y.cpu, ops::DxMode::add), ref::sigmoid_backward(r, dx.ref, dy, y.ref, ops::DxMode::add);
  close("sigmoid dx", dx, tol);
  ops::sigmoid_backward(c, dx.cpu, dy, y.cpu, ops::DxMode::overwrite);
  ref::sigmoid_backward(r, dx.ref, dy, y.ref, ops::DxMode::overwrite);
  close("sigmoid dx written over", dx, tol);
  both(ops::silu_forward, ref::silu_forward, y, x);
  close("silu y", y, tol);
  both(ops::silu_backward, ref::silu_backward, dx, dy, x, ops::DxMode::add);
  close("silu dx", dx, tol);
  both(ops::silu_backward, ref::silu_backward, dx, dy, x, ops::DxMode::overwrite);
  close("silu dx written over", dx, tol);
  both(ops::gelu_forward, ref::gelu_forward, y, x);
  close("gelu y", y, tol);
  both(ops::gelu_backward, ref::gelu_backward, dx, dy, x, ops::DxMode::add);
  close("gelu dx", dx, tol);
  both(ops::gelu_backward, ref::gelu_backward, dx, dy, x, ops::DxMode::overwrite);
  close("gelu dx written over", dx, tol);
}

void dropout(const Case& k, size_t, double tol) {
  const Shape n = k.in[0];
  for (float p : {0.f, 0.3f, 0.9f, 1.f}) {
    CAPTURE(p);
    Tensor x = randn(n, 1), dy = randn(n, 2);
    Out y = poisoned_out(n), mask{Tensor::zeros(n, DType::u8), Tensor::zeros(n, DType::u8)};
    both(ops::dropout_forward, ref::dropout_forward, y, mask, x, p, uint64_t{1234}, uint64_t{5});
    CHECK(bitwise_equal(mask.cpu, mask.ref));
    close("dropout y", y, 0);
    Out dx = grad(n, 3);
    Context c = Context::cpu(2), r = Context::cpu(1);
    ops::dropout_backward(c, dx.cpu, dy, mask.cpu, p), ref::dropout_backward(r, dx.ref, dy, mask.ref, p);
    // dx += dy * s: the compiler may fuse it into one multiply-add in one kernel and not in
    // the other (-march=native), a difference of one rounding.
    close("dropout dx", dx, tol);
    if (n[0] == 40000) {  // the mask is not trivially all kept or all dropped
      int64_t kept = 0;
      for (int64_t i = 0; i < n[0]; ++i) kept += mask.ref.data<uint8_t>()[i];
      CHECK(std::fabs(double(kept) / double(n[0]) - (1.0 - p)) < 0.02);
    }
  }
}

void broadcast(const Case& k, size_t, double tol) {
  const Shape out = k.in[0], as = k.in[1], bs = k.in[2];
  Tensor a = randn(as, 1), b = randn(bs, 2), dy = randn(out, 3);
  Out o = poisoned_out(out);
  both(ops::add_broadcast, ref::add_broadcast, o, a, b);
  close("add_broadcast", o, 0);
  both(ops::mul_broadcast, ref::mul_broadcast, o, a, b);
  close("mul_broadcast", o, 0);
  Out da = grad(as, 4), db = grad(bs, 5);
  both(ops::add_broadcast_backward, ref::add_broadcast_backward, &da, &db, dy);
  close("add da", da, tol), close("add db", db, tol);
  both(ops::mul_broadcast_backward, ref::mul_broadcast_backward, &da, &db, dy, a, b);
  close("mul da", da, tol), close("mul db", db, tol);
  both(ops::mul_broadcast_backward, ref::mul_broadcast_backward, nullptr, &db, dy, a, b);
  close("mul db alone", db, tol);
}

void layer_norm(const Case& k, size_t, double tol) {
  const Shape xs = k.in[0];
  const int64_t D = xs.back(), rows = shape_numel(xs) / D;
  Tensor x = randn(xs, 1, 2.f), gamma = randn({D}, 2), beta = randn({D}, 3), dy = randn(xs, 4);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += 1.5f;
  Out y = poisoned_out(xs), mean = poisoned_out({rows}), rstd = poisoned_out({rows});
  both(ops::layer_norm_forward, ref::layer_norm_forward, y, mean, rstd, x, gamma, beta, 1e-5f);
  close("ln y", y, tol), close("ln mean", mean, tol), close("ln rstd", rstd, tol);
  Out dx = grad(xs, 5), dg = grad({D}, 6), db = grad({D}, 7);
  both(ops::layer_norm_backward, ref::layer_norm_backward, &dx, &dg, &db, dy, x, gamma, mean.ref, rstd.ref,
       ops::DxMode::add);
  close("ln dx", dx, tol), close("ln dgamma", dg, tol), close("ln dbeta", db, tol);
  both(ops::layer_norm_backward, ref::layer_norm_backward, nullptr, nullptr, &db, dy, x, gamma, mean.ref, rstd.ref,
       ops::DxMode::add);
  close("ln dbeta alone", db, tol), close("ln dgamma untouched", dg, tol);
  Out dxo = poisoned_out(x.shape());
  both(ops::layer_norm_backward, ref::layer_norm_backward, &dxo, nullptr, nullptr, dy, x, gamma, mean.ref, rstd.ref,
       ops::DxMode::overwrite);
  close("ln dx written over", dxo, tol);
}

void softmax(const Case& k, size_t, double tol) {
  const Shape xs = k.in[0], bs = k.in.size() > 1 ? k.in[1] : Shape{};
  Tensor x = randn(xs, 1, 3.f), dy = randn(xs, 2);
  Tensor bias = bs.empty() ? Tensor() : randn(bs, 3);
  const Tensor* bp = bs.empty() ? nullptr : &bias;
  Out y = poisoned_out(xs);
  both(ops::softmax_forward, ref::softmax_forward, y, x, bp);
  close("softmax y", y, tol);
  Out dx = grad(xs, 4);
  both(ops::softmax_backward, ref::softmax_backward, dx, dy, y.ref, ops::DxMode::add);
  close("softmax dx", dx, tol);
  Out dxo = poisoned_out(y.ref.shape());
  both(ops::softmax_backward, ref::softmax_backward, dxo, dy, y.ref, ops::DxMode::overwrite);
  close("softmax dx written over", dxo, tol);
}

void permute(const Case& k, size_t, double tol) {
  const Shape in = k.in[0];
  std::vector<int> perm;
  for (int64_t d : k.in[1]) perm.push_back(static_cast<int>(d));
  Shape out;
  for (int d : perm) out.push_back(in[static_cast<size_t>(d)]);
  Tensor x = randn(in, 1), dy = randn(out, 2);
  Out o = poisoned_out(out);
  both(ops::permute, ref::permute, o, x, perm);
  close("permute", o, tol);
  Out dx = grad(in, 3);
  both(ops::permute_backward, ref::permute_backward, dx, dy, perm, ops::DxMode::add);
  close("permute backward", dx, tol);
  both(ops::permute_backward, ref::permute_backward, dx, dy, perm, ops::DxMode::overwrite);
  close("permute backward written over", dx, tol);
}

void roll(const Case& k, size_t, double tol) {
  const Shape s = k.in[0];
  const int64_t sh = k.in[1][0], sw = k.in[1][1];  // the shifts
  Tensor x = randn(s, 4), dy = randn(s, 5);
  Out o = poisoned_out(s);
  both(ops::roll, ref::roll, o, x, sh, sw);
  close("roll", o, tol);
  Out dx = grad(s, 6);
  both(ops::roll_backward, ref::roll_backward, dx, dy, sh, sw);
  close("roll backward", dx, tol);
}

void pad_hw(const Case& k, size_t, double tol) {
  const Shape s = k.in[0], padded = k.in[1];
  Tensor x = randn(s, 4), g = randn(padded, 7);
  Out o = poisoned_out(padded);
  both(ops::pad_hw, ref::pad_hw, o, x);
  close("pad_hw", o, tol);
  Out dx = grad(s, 8);
  both(ops::pad_hw_backward, ref::pad_hw_backward, dx, g);
  close("pad_hw backward", dx, tol);
}

void concat_channels(const Case& k, size_t, double tol) {
  std::vector<Tensor> inputs;
  Shape out = k.in[0];
  out[1] = 0;
  for (size_t i = 0; i < k.in.size(); ++i) {
    inputs.push_back(randn(k.in[i], 1 + i));
    out[1] += k.in[i][1];
  }
  CAPTURE(shape_str(out));
  Tensor dy = randn(out, 9);
  Out o = poisoned_out(out);
  both(ops::concat_channels, ref::concat_channels, o, inputs);
  close("concat", o, tol);
  std::vector<Out> grads;
  for (size_t i = 0; i < k.in.size(); ++i) grads.push_back(grad(k.in[i], 10 + i));
  std::vector<Tensor*> gc, gr;
  for (Out& g : grads) gc.push_back(&g.cpu), gr.push_back(&g.ref);
  Context c = Context::cpu(2), r = Context::cpu(1);
  ops::split_channels_backward(c, gc, dy), ref::split_channels_backward(r, gr, dy);
  for (const Out& g : grads) close("split", g, tol);
}

// dst, src, {dst_channel, src_channel, channels}
void copy_channels(const Case& k, size_t, double tol) {
  const int64_t dst_channel = k.in[2][0], src_channel = k.in[2][1], channels = k.in[2][2];
  const Tensor src = randn(k.in[1], 1);
  for (ops::DxMode mode : {ops::DxMode::overwrite, ops::DxMode::add}) {
    Out dst = grad(k.in[0], 2);
    both(ops::copy_channels, ref::copy_channels, dst, dst_channel, src, src_channel, channels, mode);
    close(mode == ops::DxMode::add ? "copy_channels, added" : "copy_channels", dst, tol);
  }
}

void index_select(const Case& k, size_t, double tol) {
  Tensor table = randn(k.in[0], 1), dout = randn(k.in[1], 2);
  Tensor index = labels_from({3, 0, 9, 3, 3, 5, 1, 9, 0, 2, 8, 7, 7, 4, 6});  // repeated indices
  Out o = poisoned_out(k.in[1]);
  both(ops::index_select, ref::index_select, o, table, index);
  close("index_select", o, 0);
  Out dt = grad(k.in[0], 3);
  both(ops::index_select_backward, ref::index_select_backward, dt, dout, index);
  close("index_select backward", dt, tol);
}

void cross_entropy(const Case& k, size_t, double tol) {
  const int64_t N = k.in[0][0], C = k.in[0][1];
  for (float smoothing : {0.f, 0.1f, 1.f}) {
    CAPTURE(smoothing);
    Tensor logits = randn({N, C}, 1, 4.f);
    std::vector<int64_t> lv;
    for (int64_t n = 0; n < N; ++n) lv.push_back((n * 5 + 2) % C);
    Tensor labels = labels_from(lv);
    Out loss = poisoned_out({1}), probs = poisoned_out({N, C});
    both(ops::cross_entropy_forward, ref::cross_entropy_forward, loss, probs, logits, labels, smoothing);
    close("ce loss", loss, tol), close("ce probs", probs, tol);
    Out dz = grad({N, C}, 2);
    for (float scale : {1.f, 0.25f}) {
      both(ops::cross_entropy_backward, ref::cross_entropy_backward, dz, probs.ref, labels, smoothing, scale);
      close("ce dlogits", dz, tol);
    }
    const auto correct = both(ops::count_correct, ref::count_correct, logits, labels);
    CHECK(correct.cpu == correct.ref);
  }
}

// count_correct's ties: the first maximum is the prediction.
void count_correct_ties(const Case&, size_t, double) {
  Tensor tied = Tensor::from({3, 3}, {1, 1, 0, 0, 2, 2, 5, 5, 5});
  for (const auto& lv : {std::vector<int64_t>{0, 1, 0}, std::vector<int64_t>{1, 2, 2}}) {
    const auto correct = both(ops::count_correct, ref::count_correct, tied, labels_from(lv));
    CHECK(correct.cpu == correct.ref);
  }
  Context r = Context::cpu(1);
  CHECK(ref::count_correct(r, tied, labels_from({0, 1, 0})) == 3);
}

// The optimizer steps round exactly as the reference: bitwise, after several steps.
void sgd_step(const Case& k, size_t, double) {
  const int64_t n = k.in[0][0];
  auto sgd = [](float lr, float momentum, float dampening, float wd, bool nesterov) {
    ops::SgdParams p;
    p.lr = lr, p.momentum = momentum, p.dampening = dampening, p.weight_decay = wd, p.nesterov = nesterov;
    return p;
  };
  for (const ops::SgdParams& p : {sgd(0.1f, 0, 0, 0, false), sgd(0.1f, 0, 0, 1e-2f, false),
                                  sgd(0.05f, 0.9f, 0, 5e-4f, false), sgd(0.05f, 0.9f, 0.3f, 0, false),
                                  sgd(0.05f, 0.9f, 0, 1e-4f, true)}) {
    CAPTURE(p.momentum); CAPTURE(p.dampening); CAPTURE(p.weight_decay); CAPTURE(p.nesterov);
    Tensor w0 = randn({n}, 1);
    Out w{w0, w0.clone()}, momentum = poisoned_out({n});
    for (int step = 0; step < 3; ++step)
      both(ops::sgd_step, ref::sgd_step, w, randn({n}, 10 + step), momentum, p, step == 0, nullptr, nullptr);
    CHECK(bitwise_equal(w.cpu, w.ref));
    if (p.momentum != 0.f) CHECK(bitwise_equal(momentum.cpu, momentum.ref));
  }
}

void adamw_step(const Case& k, size_t, double) {
  const int64_t n = k.in[0][0];
  ops::AdamwParams p;
  for (float wd : {0.f, 0.05f}) {
    p.weight_decay = wd;
    Tensor w0 = randn({n}, 2);
    Out w{w0, w0.clone()}, m{Tensor::zeros({n}), Tensor::zeros({n})}, v{Tensor::zeros({n}), Tensor::zeros({n})};
    for (int64_t step = 1; step <= 4; ++step)
      both(ops::adamw_step, ref::adamw_step, w, randn({n}, 20 + step), m, v, p, step, nullptr, nullptr);
    CHECK(bitwise_equal(w.cpu, w.ref));
    CHECK(bitwise_equal(m.cpu, m.ref));
    CHECK(bitwise_equal(v.cpu, v.ref));
  }
}

// ---- the table --------------------------------------------------------------------------------------

struct OpRow {
  const char* ops;          // the ops.def rows it checks
  std::vector<Case> cases;  // the inputs' shapes of each case
  double tol;               // CPU against reference (0: bit for bit)
  bool backward;            // its backward ops are checked too
  void (*check)(const Case& k, size_t index, double tol);
};

// 40000 elements: above the size from which the CPU kernels split over threads.
const std::vector<Case> kSizes = {{{{1}}}, {{{37}}}, {{{40000}}}};

const std::vector<OpRow> kRows = {
    {"fill, copy, add, axpy, scale, count_nonfinite(_into)", kSizes, 0, false, elementwise},
    // x (N, in), w (out, in); kLong where 300 products per output are summed in f32 (Eigen) vs double
    {"linear_forward, linear_backward (with and without bias, null gradients)",
     {{{{1, 1}, {1, 1}}}, {{{3, 5}, {7, 5}}}, {{{17, 33}, {9, 33}}}, {{{64, 300}, {130, 300}}, kLong}},
     kShort, true, linear},
    // the batch dimensions, then {M, N, K}; every transpose, alpha and beta
    {"matmul", {{{{}, {5, 7, 3}}}, {{{3}, {1, 9, 4}}}, {{{2, 3}, {6, 5, 11}}}, {{{2}, {150, 130, 70}}, kLong}},
     kShort, false, matmul},
    // x, w; strides, padding, dilation, groups (conv_cases_params, in order)
    {"conv2d_forward, conv2d_backward (strides, padding, dilation, groups, depthwise, null gradients, dx written over)",
     {{{{2, 3, 7, 9}, {4, 3, 3, 3}}},          // odd sizes, 3x3 "same"
      {{{2, 4, 7, 6}, {6, 2, 3, 3}}},          // stride 2, 2 groups
      {{{2, 3, 10, 11}, {4, 3, 3, 3}}},        // dilation 2
      {{{3, 5, 4, 6}, {3, 5, 1, 1}}},          // 1x1 (x is the column matrix)
      {{{2, 5, 5, 5}, {3, 5, 1, 1}}},          // 1x1 stride 2
      {{{1, 3, 29, 27}, {8, 3, 7, 7}}, kLong}, // a 7x7/2 stem: 147-term sums
      {{{2, 2, 3, 3}, {2, 2, 3, 3}}},          // kernel as large as the image
      {{{2, 3, 8, 9}, {4, 3, 3, 2}}},          // non-square everything
      // dW of a depthwise kernel sums up to N * OH * OW products in f32: kLong.
      {{{2, 6, 9, 8}, {6, 1, 3, 3}}, kLong},   // depthwise
      {{{2, 4, 9, 10}, {8, 1, 5, 5}}, kLong},  // multiplier 2, 5x5 stride 2
      {{{3, 3, 12, 13}, {3, 1, 7, 7}}, kLong}, // 7x7 depthwise
      {{{2, 5, 15, 12}, {5, 1, 3, 3}}, kLong}, // dilation 2, stride 2
      {{{8, 64, 3, 3}, {48, 32, 3, 3}}, kLong},// several images per GEMM
      {{{2, 16, 30, 30}, {4, 16, 3, 3}}, kLong}},  // several column tiles
     kShort, true, conv2d},
    // x; the windows of pool2d, in order, padding, ceil_mode, count_include_pad
    {"max_pool2d_*, avg_pool2d_*",
     {{{{2, 3, 7, 7}}}, {{{2, 3, 8, 9}}}, {{{1, 2, 6, 7}}}, {{{1, 2, 2, 2}}}, {{{2, 2, 8, 8}}}, {{{2, 2, 9, 7}}},
      {{{1, 3, 7, 5}}}},
     kShort, true, pool2d},
    // x, y: bins that do not divide, upsampling, global
    {"adaptive_avg_pool2d_*",
     {{{{2, 3, 7, 9}, {2, 3, 1, 1}}}, {{{2, 3, 7, 9}, {2, 3, 3, 5}}}, {{{2, 3, 7, 9}, {2, 3, 7, 9}}},
      {{{1, 2, 3, 3}, {1, 2, 5, 4}}}, {{{2, 4, 56, 56}, {2, 4, 1, 1}}}},
     kShort, true, adaptive_avg_pool2d},
    {"batch_norm_forward_train, batch_norm_forward_eval, batch_norm_backward (null gradients, dx written over)",
     {{{{4, 3}}}, {{{3, 2, 5}}}, {{{2, 3, 5, 7}}}, {{{8, 16, 14, 14}}}, {{{2, 5, 3, 4}, {2, 3, 3, 4}}},
      {{{8, 40, 7, 7}, {8, 24, 7, 7}}}},
     kShort, true, batch_norm},
    {"relu, sigmoid, silu, gelu (relu bit for bit)", kSizes, kShort, true, activations},
    {"dropout_forward, dropout_backward (the same mask bits from the same Rng counter)", kSizes, kShort, true, dropout},
    // out, a, b
    {"add_broadcast, mul_broadcast and their backward (null gradients)",
     {{{{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 1, 1}}},  // SE
      {{{3, 2, 2, 4}, {3, 2, 2, 4}, {3, 1, 1, 1}}},  // drop path
      {{{3, 2, 5, 5}, {1, 2, 5, 5}, {3, 1, 5, 5}}},  // Swin
      {{{2, 3, 4}, {1, 3, 1}, {2, 1, 4}}},
      {{{4, 1, 3, 2, 2, 3}, {4, 1, 1, 2, 1, 3}, {1, 1, 3, 1, 2, 1}}},
      {{{1, 1}, {1, 1}, {1, 1}}},
      {{{64, 700}, {64, 700}, {1, 700}}}},
     kShort, true, broadcast},
    {"layer_norm_forward, layer_norm_backward (null gradients)",
     {{{{5, 7}}}, {{{2, 3, 16}}}, {{{4, 1}}}, {{{3, 49, 96}}}}, kShort, true, layer_norm},
    // x, and a bias broadcast over it (none for the first)
    {"softmax_forward (with and without a bias), softmax_backward",
     {{{{3, 7}}}, {{{5, 1}, {1}}}, {{{2, 3, 5, 5}, {3, 5, 5}}}, {{{2, 3, 5, 5}, {5, 5}}}, {{{4, 1000}, {1000}}}},
     kShort, true, softmax},
    // x, and the permutation
    {"permute, permute_backward",
     {{{{2, 3, 4, 5}, {0, 2, 3, 1}}}, {{{2, 3, 4, 5}, {3, 1, 2, 0}}}, {{{7, 9}, {1, 0}}},
      {{{2, 1, 3, 2, 2, 3}, {5, 4, 3, 2, 1, 0}}}, {{{2, 3, 2, 3, 2, 4}, {0, 1, 3, 2, 4, 5}}}},
     0, true, permute},
    // x, and the shifts along H and W
    {"roll, roll_backward",
     {{{{2, 5, 7, 3}, {1, 2}}}, {{{2, 5, 7, 3}, {-3, 5}}}, {{{2, 5, 7, 3}, {0, 0}}}, {{{2, 5, 7, 3}, {7, -9}}},
      {{{2, 5, 7, 3}, {-12, 14}}}},
     0, true, roll},
    // x, and the padded output
    {"pad_hw, pad_hw_backward",
     {{{{2, 5, 7, 3}, {2, 5, 7, 3}}}, {{{2, 5, 7, 3}, {2, 8, 7, 3}}}, {{{2, 5, 7, 3}, {2, 5, 10, 3}}},
      {{{2, 5, 7, 3}, {2, 7, 9, 3}}}},
     0, true, pad_hw},
    // the parts
    {"concat_channels, split_channels_backward",
     {{{{2, 3, 4, 5}, {2, 1, 4, 5}, {2, 5, 4, 5}}}, {{{3, 2}, {3, 7}}}, {{{1, 4, 3}}}}, 0, true, concat_channels},
    // dst, src, {dst_channel, src_channel, channels}
    {"copy_channels (written over and added)",
     {{{{2, 7, 3, 4}, {2, 3, 3, 4}, {4, 0, 3}}}, {{{3, 5, 2}, {3, 9, 2}, {0, 6, 3}}}, {{{1, 4}, {1, 4}, {1, 1, 2}}},
      {{{2, 6, 5, 5}, {2, 6, 5, 5}, {2, 2, 0}}}},
     0, false, copy_channels},
    // the table, the output (15 indices, some repeated)
    {"index_select, index_select_backward (scatter-add over repeated indices)", {{{{10, 6}, {15, 6}}}}, kShort, true,
     index_select},
    // logits (N, C); label smoothing, scale
    {"cross_entropy_forward, cross_entropy_backward, count_correct",
     {{{{5, 7}}}, {{{8, 1000}}}, {{{3, 1}}}}, kShort, true, cross_entropy},
    {"count_correct's ties", {{{{3, 3}}}}, 0, false, count_correct_ties},
    {"sgd_step (bit for bit)", {{{{40037}}}}, 0, false, sgd_step},
    {"adamw_step (bit for bit)", {{{{40037}}}}, 0, false, adamw_step},
};

}  // namespace

TEST_CASE("ref: every CPU op against its reference kernel, row by row of the table") {
  for (const OpRow& row : kRows) {
    CAPTURE(row.ops);
    for (size_t i = 0; i < row.cases.size(); ++i) {
      const Case& k = row.cases[i];
      std::string shapes;
      for (const Shape& s : k.in) shapes += shape_str(s) + " ";
      CAPTURE(shapes);
      const int before = gradient_checks;
      row.check(k, i, k.tol >= 0 ? k.tol : row.tol);
      CHECK_MESSAGE((gradient_checks > before) == row.backward, row.ops, ": the row says its backward is ",
                    row.backward ? "" : "not ", "checked");
    }
  }
}
