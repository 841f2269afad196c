// Tests of the CPU batch norm: training forward by hand (running stats after 2 steps, biased
// variance to normalise, unbiased for running_var), (N, C, H, W) against plain loops, eval,
// backward against centred differences, accumulation, and thread-count invariance.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/ops.hpp"
#include "kernels/ref/ref_ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"
#include "tests/kernels/kernel_params.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::for_each_half_host_case;
using dpx::testing::check_close;
using dpx::testing::poisoned;
using dpx::testing::randn;

TEST_CASE("batch_norm train (N, C): hand values and running stats after two steps") {
  Context ctx = Context::cpu();
  // Channel 0 holds 1..4 (mean 2.5, biased var 1.25, unbiased 5/3); channel 1 ten times that.
  Tensor x = Tensor::from({4, 2}, {1, 10, 2, 20, 3, 30, 4, 40});
  Tensor gamma = Tensor::from({2}, {1, 2}), beta = Tensor::from({2}, {0, 1});
  Tensor rm = Tensor::from({2}, {0, 0}), rv = Tensor::from({2}, {1, 1});
  Tensor mean = Tensor::empty({2}), invstd = Tensor::empty({2}), y = Tensor::empty({4, 2});
  ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                ops::Epilogue::none);
  const double z[4] = {-1.3416354200, -0.4472118067, 0.4472118067, 1.3416354200};   // ch 0
  const double z1[4] = {-1.3416407328, -0.4472135776, 0.4472135776, 1.3416407328};  // ch 1
  std::vector<double> want;
  for (int n = 0; n < 4; ++n) want.insert(want.end(), {z[n], 2 * z1[n] + 1});
  check_close(y, want);
  check_close(mean, {2.5, 25});
  check_close(invstd, {0.8944236133, 0.0894427155});
  // running = 0.9 running + 0.1 batch (unbiased variance)
  check_close(rm, {0.25, 2.5});
  check_close(rv, {0.9 + 0.1 * 5 / 3., 0.9 + 0.1 * 500 / 3.});

  // Second step with 2x: mean 5 and 50, unbiased variance 20/3 and 2000/3.
  Tensor x2 = Tensor::from({4, 2}, {2, 20, 4, 40, 6, 60, 8, 80});
  ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x2, gamma, beta, 0.1f, 1e-5f, nullptr,
                                ops::Epilogue::none);
  check_close(rm, {0.9 * 0.25 + 0.5, 0.9 * 2.5 + 5});
  check_close(rv, {0.9 * (0.9 + 0.5 / 3) + 2 / 3., 0.9 * (0.9 + 50 / 3.) + 200 / 3.});
}

TEST_CASE("batch_norm train (N, C, H, W) against plain loops, then eval with the running stats") {
  Context ctx = Context::cpu(2);
  const int64_t N = 3, C = 4, H = 5, W = 6;
  Tensor x = randn({N, C, H, W}, 1, 3.f), gamma = randn({C}, 2), beta = randn({C}, 3);
  Tensor rm = randn({C}, 4), rv = Tensor::from({C}, {1, 2, 0.5f, 4});
  const auto rm0 = rm.to_vector(), rv0 = rv.to_vector();
  Tensor mean = Tensor::empty({C}), invstd = Tensor::empty({C}), y = Tensor::empty(x.shape());
  ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.2f, 1e-3f, nullptr,
                                ops::Epilogue::none);

  // The reference kernel (kernels/ref/batch_norm.cpp), from the same running stats.
  Context rctx = Context::cpu();
  Tensor want_rm = Tensor::from({C}, rm0), want_rv = Tensor::from({C}, rv0);
  Tensor want_y = Tensor::empty(x.shape()), want_mean = Tensor::empty({C}), want_invstd = Tensor::empty({C});
  ref::batch_norm_forward_train(rctx, want_y, want_mean, want_invstd, want_rm, want_rv, x, gamma, beta, 0.2f, 1e-3f,
                                nullptr, ops::Epilogue::none);
  check_close(y, want_y);
  check_close(mean, want_mean);
  check_close(invstd, want_invstd);
  check_close(rm, want_rm);
  check_close(rv, want_rv);

  ops::batch_norm_forward_eval(ctx, y, x, gamma, beta, rm, rv, 1e-3f, ops::Epilogue::none);
  ref::batch_norm_forward_eval(rctx, want_y, x, gamma, beta, rm, rv, 1e-3f, ops::Epilogue::none);
  check_close(y, want_y);
}

TEST_CASE("batch_norm train counts the batch in batches_tracked, once a call, on either host backend") {
  const Tensor x = randn({3, 2, 2, 2}, 11), gamma = randn({2}, 12), beta = randn({2}, 13);
  for (bool reference : {false, true}) {
    CAPTURE(reference);
    Context ctx = reference ? Context::ref() : Context::cpu(2);
    ctx.compute = DType::bf16;  // a bf16 x below: the widened path counts once too
    Tensor rm = Tensor::zeros({2}), rv = Tensor::zeros({2}), mean = Tensor::empty({2}), invstd = Tensor::empty({2});
    Tensor y = Tensor::empty(x.shape()), count = Tensor::zeros({1}, DType::i64);
    count.data<int64_t>()[0] = 41;
    ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, &count,
                                  ops::Epilogue::none);
    CHECK(count.data<int64_t>()[0] == 42);
    ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x.cast(DType::bf16), gamma, beta, 0.1f, 1e-5f, &count,
                                  ops::Epilogue::relu);
    CHECK(count.data<int64_t>()[0] == 43);
    ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::none);
    CHECK(count.data<int64_t>()[0] == 43);
    Tensor wrong = Tensor::zeros({1});
    CHECK_THROWS_WITH_AS(ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f,
                                                       &wrong, ops::Epilogue::none),
                         doctest::Contains("batch_norm_forward_train: batches_tracked"), Error);
  }
}

TEST_CASE("batch_norm backward: centred differences of sum(r * y), and accumulation") {
  Context ctx = Context::cpu();
  const int64_t N = 3, C = 2;
  Tensor x = randn({N, C, 2, 2}, 5, 2.f), gamma = randn({C}, 6), beta = randn({C}, 7);
  Tensor r = randn(x.shape(), 8);
  Tensor rm = Tensor::zeros({C}), rv = Tensor::zeros({C});
  Tensor mean = Tensor::empty({C}), invstd = Tensor::empty({C}), y = Tensor::empty(x.shape());
  auto loss = [&]() {
    ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::none);
    double l = 0;
    for (int64_t i = 0; i < y.numel(); ++i)
      l += static_cast<double>(y.data<float>()[i]) * r.data<float>()[i];
    return l;
  };
  loss();
  Tensor dx = Tensor::zeros(x.shape()), dg = Tensor::zeros({C}), db = Tensor::zeros({C});
  ops::batch_norm_backward(ctx, &dx, &dg, &db, r, x, gamma, mean, invstd, ops::DxMode::add, nullptr, nullptr);
  auto numeric = [&](Tensor& t) {
    std::vector<double> g(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) {
      float& v = t.data<float>()[i];
      const float keep = v, h = 1e-2f;
      v = keep + h;
      const double up = loss();
      v = keep - h;
      g[i] = (up - loss()) / (2.0 * h);
      v = keep;
    }
    return g;
  };
  const auto ndx = numeric(x), ndg = numeric(gamma), ndb = numeric(beta);
  check_close(dx, ndx, 2e-3);
  check_close(dg, ndg, 2e-3);
  check_close(db, ndb, 2e-3);

  // Null gradients are skipped; the others add up.
  loss();
  ops::batch_norm_backward(ctx, &dx, nullptr, &db, r, x, gamma, mean, invstd, ops::DxMode::add, nullptr, nullptr);
  auto twice = [](std::vector<double> v) {
    for (double& e : v) e *= 2;
    return v;
  };
  check_close(dx, twice(ndx), 2e-3);
  check_close(dg, ndg, 2e-3);
  check_close(db, twice(ndb), 2e-3);

  // DxMode::overwrite: dx's old contents (NaN) are written over.
  Tensor dx_over = Tensor::empty(x.shape());
  ops::fill(ctx, dx_over, std::numeric_limits<float>::quiet_NaN());
  ops::batch_norm_backward(ctx, &dx_over, nullptr, nullptr, r, x, gamma, mean, invstd, ops::DxMode::overwrite, nullptr, nullptr);
  check_close(dx_over, ndx, 2e-3);
}

TEST_CASE("batch_norm: bitwise identical for 1 and 2 threads") {
  const int64_t N = 8, C = 16;
  Tensor x = randn({N, C, 20, 20}, 9), gamma = randn({C}, 10), beta = randn({C}, 11);
  Tensor dy = randn(x.shape(), 12);
  auto run = [&](int threads) {
    Context ctx = Context::cpu(threads);
    Tensor rm = Tensor::zeros({C}), rv = Tensor::zeros({C});
    Tensor mean = Tensor::empty({C}), invstd = Tensor::empty({C}), y = Tensor::empty(x.shape());
    Tensor ye = Tensor::empty(x.shape());
    ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::none);
    ops::batch_norm_forward_eval(ctx, ye, x, gamma, beta, rm, rv, 1e-5f, ops::Epilogue::none);
    Tensor dx = Tensor::zeros(x.shape()), dg = Tensor::zeros({C}), db = Tensor::zeros({C});
    ops::batch_norm_backward(ctx, &dx, &dg, &db, dy, x, gamma, mean, invstd, ops::DxMode::add, nullptr, nullptr);
    return std::vector<Tensor>{y, ye, rm, rv, dx, dg, db};
  };
  auto one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) CHECK(bitwise_equal(one[i], two[i]));
}

TEST_CASE("batch_norm: one value per channel cannot train, channel counts must match") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::zeros({1, 3}), y = Tensor::empty({1, 3}), c3 = Tensor::zeros({3});
  Tensor m = Tensor::empty({3}), s = Tensor::empty({3}), rm = Tensor::zeros({3}),
         rv = Tensor::zeros({3});
  CHECK_THROWS_WITH_AS(
      ops::batch_norm_forward_train(ctx, y, m, s, rm, rv, x, c3, c3, 0.1f, 1e-5f, nullptr, ops::Epilogue::none),
      doctest::Contains("expected more than 1 value per channel"), Error);
  Tensor x2 = Tensor::zeros({2, 4}), y2 = Tensor::empty({2, 4});
  CHECK_THROWS_WITH_AS(ops::batch_norm_forward_eval(ctx, y2, x2, c3, c3, rm, rv, 1e-5f, ops::Epilogue::none),
                       doctest::Contains("gamma has shape (3), expected (4)"), Error);
}

namespace {
using Activation = void (*)(Context&, Tensor&, const Tensor&);

// The training forward's outputs: plain (the activation's input) and with the epilogue; and the
// eval forward's with the epilogue.
struct FoldedForward {
  Tensor plain, fused, fused_eval;
};

// A batch norm's forward with `epilogue` against the plain forward and then `activation`
// (relu_forward, silu_forward), in training and in eval mode, bit for bit, the statistics being
// the plain op's; x may hold more channels than C (the ops' prefix).
FoldedForward check_folded_forward(Context& ctx, const Tensor& x, int64_t C, const Tensor& gamma, const Tensor& beta,
                                   Tensor& rm, Tensor& rv, Tensor& mean, Tensor& invstd, ops::Epilogue epilogue,
                                   Activation activation) {
  Shape ys = x.shape();
  ys[1] = C;
  FoldedForward f{Tensor::empty(ys), Tensor::empty(ys), Tensor::empty(ys)};
  Tensor rm2 = rm.clone(), rv2 = rv.clone(), want = Tensor::empty(ys), plain_eval = Tensor::empty(ys);
  ops::batch_norm_forward_train(ctx, f.plain, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                ops::Epilogue::none);
  activation(ctx, want, f.plain);
  ops::batch_norm_forward_train(ctx, f.fused, mean, invstd, rm2, rv2, x, gamma, beta, 0.1f, 1e-5f, nullptr, epilogue);
  CHECK(bitwise_equal(f.fused, want));
  CHECK(bitwise_equal(rm2, rm));  // the statistics are the plain op's
  CHECK(bitwise_equal(rv2, rv));
  ops::batch_norm_forward_eval(ctx, plain_eval, x, gamma, beta, rm, rv, 1e-5f, ops::Epilogue::none);
  activation(ctx, want, plain_eval);
  ops::batch_norm_forward_eval(ctx, f.fused_eval, x, gamma, beta, rm, rv, 1e-5f, epilogue);
  CHECK(bitwise_equal(f.fused_eval, want));
  return f;
}
}  // namespace

TEST_CASE("batch_norm Epilogue::relu: bitwise relu_forward of the plain output, train and eval") {
  const int64_t N = 3, C = 5;
  Tensor x = randn({N, C, 7, 6}, 13, 2.f), gamma = randn({C}, 14), beta = randn({C}, 15);
  x.data<float>()[4] = std::numeric_limits<float>::quiet_NaN();  // NaN passes, as torch.relu
  for (bool reference : {false, true}) {
    CAPTURE(reference);
    Context ctx = reference ? Context::ref() : Context::cpu(2);
    Tensor rm = Tensor::zeros({C}), rv = Tensor::from({C}, {1, 2, 0.5f, 4, 1});
    Tensor mean = Tensor::empty({C}), invstd = Tensor::empty({C});
    const FoldedForward f =
        check_folded_forward(ctx, x, C, gamma, beta, rm, rv, mean, invstd, ops::Epilogue::relu, ops::relu_forward);
    int64_t zeros = 0;  // the test means something: about half the outputs were clamped
    for (float v : f.fused_eval.to_vector()) zeros += v == 0.f;
    CHECK(zeros > f.fused_eval.numel() / 4);

    // Backward with relu_out: relu_backward, then the plain batch norm backward, in one pass.
    Tensor dy = randn(x.shape(), 16), g = Tensor::empty(x.shape());
    ops::relu_backward(ctx, g, dy, f.fused, ops::DxMode::overwrite);
    for (ops::DxMode mode : {ops::DxMode::overwrite, ops::DxMode::add}) {
      Tensor dx_want = randn(x.shape(), 17), dx = dx_want.clone();
      Tensor dg_want = randn({C}, 18), dg = dg_want.clone(), db_want = randn({C}, 19), db = db_want.clone();
      ops::batch_norm_backward(ctx, &dx_want, &dg_want, &db_want, g, x, gamma, mean, invstd, mode,
                               nullptr, nullptr);
      ops::batch_norm_backward(ctx, &dx, &dg, &db, dy, x, gamma, mean, invstd, mode, &f.fused, nullptr);
      CHECK(bitwise_equal(dx, dx_want));
      CHECK(bitwise_equal(dg, dg_want));
      CHECK(bitwise_equal(db, db_want));
    }
  }
}

// Epilogue::silu writes silu(BN(x)), and batch_norm_backward with silu_beta takes the SiLU's
// output gradient, recomputing BN(x): against silu_forward / silu_backward around the plain ops,
// bit for bit on the CPU (y formed from the saved statistics both ways, every exp the same vector
// one), to within the rounding of the recomputed input in the reference (whose forward uses its
// statistics in double). Planes (N, C, H, W), rows (N, C) over two channel blocks, and the first C
// channels of a wider x.
TEST_CASE("batch_norm Epilogue::silu and silu_beta: a SiLU's forward and backward folded in") {
  struct Case {
    const char* name;
    Shape x;
    int64_t c;
  };
  for (const Case& k : {Case{"planes", {3, 5, 7, 6}, 5}, Case{"rows", {40, 20}, 20}, Case{"prefix", {3, 7, 5, 3}, 4}})
    for (bool reference : {false, true}) {
      const std::string layout = k.name;
      CAPTURE(layout);
      CAPTURE(reference);
      Context ctx = reference ? Context::ref() : Context::cpu(2);
      const int64_t C = k.c;
      Shape ys = k.x;
      ys[1] = C;
      Tensor x = randn(k.x, 31, 2.f), gamma = randn({C}, 32), beta = randn({C}, 33);
      Tensor rm = Tensor::zeros({C}), rv = Tensor::zeros({C});
      Tensor mean = Tensor::empty({C}), invstd = Tensor::empty({C});
      const FoldedForward f =
          check_folded_forward(ctx, x, C, gamma, beta, rm, rv, mean, invstd, ops::Epilogue::silu, ops::silu_forward);

      Tensor dy = randn(ys, 34), g = Tensor::empty(ys);
      ops::silu_backward(ctx, g, dy, f.plain, ops::DxMode::overwrite);
      for (ops::DxMode mode : {ops::DxMode::overwrite, ops::DxMode::add}) {
        Tensor dx_want = randn(k.x, 35), dx = dx_want.clone();
        Tensor dg_want = randn({C}, 36), dg = dg_want.clone(), db_want = randn({C}, 37), db = db_want.clone();
        ops::batch_norm_backward(ctx, &dx_want, &dg_want, &db_want, g, x, gamma, mean, invstd, mode, nullptr,
                                 nullptr);
        ops::batch_norm_backward(ctx, &dx, &dg, &db, dy, x, gamma, mean, invstd, mode, nullptr, &beta);
        if (reference) {
          CHECK(dpx::testing::scaled_error(dx, dx_want) <= 1e-5);  // the channels past C: both untouched
          CHECK(dpx::testing::scaled_error(dg, dg_want) <= 1e-5);
          CHECK(dpx::testing::scaled_error(db, db_want) <= 1e-5);
        } else {
          CHECK(bitwise_equal(dx, dx_want));
          CHECK(bitwise_equal(dg, dg_want));
          CHECK(bitwise_equal(db, db_want));
        }
      }
    }
}

TEST_CASE("batch_norm epilogues: a convolution offers no SiLU; relu_out and silu_beta exclude each other") {
  Context ctx = Context::cpu();
  Tensor x = randn({2, 3, 4, 4}, 41), dy = randn({2, 3, 4, 4}, 42), c3 = Tensor::from({3}, {1, 1, 1});
  Tensor c2 = Tensor::from({2}, {1, 1});
  Tensor dx = Tensor::empty(x.shape());
  CHECK_THROWS_WITH_AS(
      ops::batch_norm_backward(ctx, &dx, nullptr, nullptr, dy, x, c3, c3, c3, ops::DxMode::overwrite, &dy, &c3),
      doctest::Contains("relu_out and silu_beta given together"), Error);
  CHECK_THROWS_WITH_AS(
      ops::batch_norm_backward(ctx, &dx, nullptr, nullptr, dy, x, c3, c3, c3, ops::DxMode::overwrite, nullptr, &c2),
      doctest::Contains("silu_beta has shape (2), expected (3)"), Error);
  ops::Conv2dParams p;
  p.epilogue = ops::Epilogue::silu;
  Tensor w = randn({3, 3, 1, 1}, 43), y = Tensor::empty({2, 3, 4, 4});
  CHECK_THROWS_WITH_AS(ops::conv2d_forward(ctx, y, x, w, nullptr, p),
                       doctest::Contains("conv2d_forward: epilogue silu is not offered"), Error);
}

// DenseNet's layers normalise the first C channels of their block's buffer in place: the ops on
// a wider x give, bit for bit, what they give on those channels copied out, read nothing else
// (the other channels are NaN here) and write no other channel of dx.
TEST_CASE("batch_norm on the first C channels of a wider x: as on a copy of them, nothing else touched") {
  const int64_t N = 3, C = 4, Cx = 7, H = 5, W = 3;
  Tensor buf = randn({N, Cx, H, W}, 21, 2.f), gamma = randn({C}, 22), beta = randn({C}, 23);
  float* b = buf.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = C * H * W; i < Cx * H * W; ++i) b[n * Cx * H * W + i] = std::numeric_limits<float>::quiet_NaN();
  for (bool reference : {false, true}) {
    CAPTURE(reference);
    Context ctx = reference ? Context::ref() : Context::cpu(2);
    Tensor x = Tensor::empty({N, C, H, W});
    ops::copy_channels(ctx, x, 0, buf, 0, C, ops::DxMode::overwrite);
    Tensor rm = Tensor::zeros({C}), rv = Tensor::from({C}, {1, 2, 0.5f, 4}), rm2 = rm.clone(), rv2 = rv.clone();
    Tensor mean = Tensor::empty({C}), invstd = Tensor::empty({C}), mean2 = mean.clone(), invstd2 = invstd.clone();
    Tensor want = Tensor::empty({N, C, H, W}), got = Tensor::empty({N, C, H, W});
    ops::batch_norm_forward_train(ctx, want, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::relu);
    ops::batch_norm_forward_train(ctx, got, mean2, invstd2, rm2, rv2, buf, gamma, beta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::relu);
    CHECK(bitwise_equal(got, want));
    CHECK(bitwise_equal(mean2, mean));
    CHECK(bitwise_equal(rv2, rv));
    ops::batch_norm_forward_eval(ctx, want, x, gamma, beta, rm, rv, 1e-5f, ops::Epilogue::none);
    ops::batch_norm_forward_eval(ctx, got, buf, gamma, beta, rm, rv, 1e-5f, ops::Epilogue::none);
    CHECK(bitwise_equal(got, want));

    Tensor dy = randn({N, C, H, W}, 24), relu_out = want.clone();
    for (ops::DxMode mode : {ops::DxMode::overwrite, ops::DxMode::add}) {
      Tensor dx_want = randn({N, C, H, W}, 25), dbuf = randn({N, Cx, H, W}, 26);
      ops::copy_channels(ctx, dx_want, 0, dbuf, 0, C, ops::DxMode::overwrite);
      const Tensor dbuf_before = dbuf.clone();
      Tensor dg_want = Tensor::zeros({C}), dg = Tensor::zeros({C});
      ops::batch_norm_backward(ctx, &dx_want, &dg_want, nullptr, dy, x, gamma, mean, invstd, mode, &relu_out, nullptr);
      ops::batch_norm_backward(ctx, &dbuf, &dg, nullptr, dy, buf, gamma, mean, invstd, mode, &relu_out, nullptr);
      CHECK(bitwise_equal(dg, dg_want));
      Tensor dx_got = Tensor::empty({N, C, H, W}), rest_got = Tensor::empty({N, Cx - C, H, W});
      Tensor rest_want = rest_got.clone();
      ops::copy_channels(ctx, dx_got, 0, dbuf, 0, C, ops::DxMode::overwrite);
      CHECK(bitwise_equal(dx_got, dx_want));
      ops::copy_channels(ctx, rest_got, 0, dbuf, C, Cx - C, ops::DxMode::overwrite);
      ops::copy_channels(ctx, rest_want, 0, dbuf_before, C, Cx - C, ops::DxMode::overwrite);
      CHECK(bitwise_equal(rest_got, rest_want));
    }
  }
  Context ctx = Context::cpu();
  Tensor c4 = Tensor::zeros({C}), too_wide = Tensor::empty({N, Cx + 1, H, W});
  CHECK_THROWS_WITH_AS(ops::batch_norm_forward_eval(ctx, too_wide, buf, c4, c4, c4, c4, 1e-5f, ops::Epilogue::none),
                       doctest::Contains("y has shape (3, 8, 5, 3), expected (3, 7, 5, 3) or the same with fewer "
                                         "channels"),
                       Error);
}

// Under --precision bf16|fp16 a convolution hands the batch norm after it a map in that
// precision (ops.def, "half-precision maps"). On the host the ops run on the map widened and
// round what they write (kernels/host_half.hpp): the contract the CUDA kernels are tested
// against (tests/cuda/test_precision.cpp, its last case). Each result is the fp32 ops' on the widened values,
// bit for bit, and a half output is the fp32 one rounded; for both host backends and both
// half types, in NCHW and channels-last, on the first C channels of a wider x for batch norm.
TEST_CASE("half-precision maps: a convolution's bf16/fp16 output and gradient, a batch norm's bf16/fp16 input") {
  const auto rounded = [](const Tensor& t, DType dtype) { return t.cast(dtype); };
  for_each_half_host_case([&](Context& ctx, DType half, bool channels_last) {
    ops::Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    p.format = channels_last ? ops::MemoryFormat::channels_last : ops::MemoryFormat::contiguous;
    const Shape x_shape = channels_last ? Shape{2, 5, 6, 3} : Shape{2, 3, 5, 6};
    const Shape y_shape = channels_last ? Shape{2, 5, 6, 4} : Shape{2, 4, 5, 6};
    Tensor x = randn(x_shape, 51), w = randn({4, 3, 3, 3}, 52);
    // The forward: y in half is the fp32 y rounded.
    Tensor y32 = Tensor::empty(y_shape), yh = Tensor::empty(y_shape, half);
    ops::conv2d_forward(ctx, y32, x, w, nullptr, p);
    ops::conv2d_forward(ctx, yh, x, w, nullptr, p);
    CHECK(bitwise_equal(yh, rounded(y32, half)));
    // With a bias and the ReLU (a map the next convolution reads): the same, rounded once.
    ops::Conv2dParams relu = p;
    relu.epilogue = ops::Epilogue::relu;
    const Tensor bias = randn({4}, 55);
    ops::conv2d_forward(ctx, y32, x, w, &bias, relu);
    ops::conv2d_forward(ctx, yh, x, w, &bias, relu);
    CHECK(bitwise_equal(yh, rounded(y32, half)));
    // The ReLU's backward reads its half output widened.
    const Tensor g = randn(y_shape, 56);
    Tensor gx_a = Tensor::empty(y_shape), gx_b = Tensor::empty(y_shape);
    ops::relu_backward(ctx, gx_a, g, yh, ops::DxMode::overwrite);
    ops::relu_backward(ctx, gx_b, g, yh.cast(DType::f32), ops::DxMode::overwrite);
    CHECK(bitwise_equal(gx_a, gx_b));
    // And writes its dx in half for the convolution before it: the fp32 dx rounded.
    Tensor gx_h = Tensor::empty(y_shape, half);
    ops::relu_backward(ctx, gx_h, g, yh, ops::DxMode::overwrite);
    CHECK(bitwise_equal(gx_h, rounded(gx_b, half)));
    // The backward from a half dy: the fp32 backward of its widened values, the bias gradient
    // (a ReLU's half gradient) their sum.
    const Tensor dyh = rounded(randn(y_shape, 53), half), dy32 = dyh.cast(DType::f32);
    Tensor dx_a = Tensor::zeros(x_shape), dw_a = Tensor::zeros(w.shape()), db_h = randn({4}, 57);
    Tensor dx_b = Tensor::zeros(x_shape), dw_b = Tensor::zeros(w.shape()), db_w = db_h.clone();
    ops::conv2d_backward(ctx, &dx_a, &dw_a, &db_h, dyh, x, w, p, ops::DxMode::overwrite);
    ops::conv2d_backward(ctx, &dx_b, &dw_b, &db_w, dy32, x, w, p, ops::DxMode::overwrite);
    CHECK(bitwise_equal(dx_a, dx_b));
    CHECK(bitwise_equal(dw_a, dw_b));
    CHECK(bitwise_equal(db_h, db_w));
    // A half dx (the dy of a ReLU before the convolution): the fp32 dx rounded, the other
    // gradients as before; that ReLU's backward reads it widened.
    Tensor dx_h = Tensor::empty(x_shape, half), dw_h = Tensor::zeros(w.shape()), dw_f = Tensor::zeros(w.shape());
    ops::conv2d_backward(ctx, &dx_h, &dw_h, nullptr, dyh, x, w, p, ops::DxMode::overwrite);
    ops::conv2d_backward(ctx, &dx_b, &dw_f, nullptr, dyh, x, w, p, ops::DxMode::overwrite);
    CHECK(bitwise_equal(dx_h, rounded(dx_b, half)));
    CHECK(bitwise_equal(dw_h, dw_f));
    const Tensor x_relu = rounded(randn(x_shape, 58), half);
    Tensor rdx_a = Tensor::empty(x_shape), rdx_b = Tensor::empty(x_shape), rdx_h = Tensor::empty(x_shape, half);
    ops::relu_backward(ctx, rdx_a, dx_h, x_relu, ops::DxMode::overwrite);
    ops::relu_backward(ctx, rdx_b, dx_h.cast(DType::f32), x_relu, ops::DxMode::overwrite);
    CHECK(bitwise_equal(rdx_a, rdx_b));
    ops::relu_backward(ctx, rdx_h, dx_h, x_relu, ops::DxMode::overwrite);  // all three half
    CHECK(bitwise_equal(rdx_h, rounded(rdx_b, half)));
    // A half x (a batch norm's activated output before the convolution), forward with a bias
    // into fp32 and backward: the fp32 ops on its widened values.
    const Tensor xh = rounded(x, half), xw = xh.cast(DType::f32), b = randn({4}, 54);
    Tensor yb_a = Tensor::empty(y_shape), yb_b = Tensor::empty(y_shape);
    ops::conv2d_forward(ctx, yb_a, xh, w, &b, p);
    ops::conv2d_forward(ctx, yb_b, xw, w, &b, p);
    CHECK(bitwise_equal(yb_a, yb_b));
    Tensor gb_a = Tensor::zeros({4}), gb_b = Tensor::zeros({4});
    ops::conv2d_backward(ctx, &dx_a, &dw_a, &gb_a, dy32, xh, w, p, ops::DxMode::overwrite);
    ops::conv2d_backward(ctx, &dx_b, &dw_b, &gb_b, dy32, xw, w, p, ops::DxMode::overwrite);
    CHECK(bitwise_equal(dx_a, dx_b));
    CHECK(bitwise_equal(dw_a, dw_b));
    CHECK(bitwise_equal(gb_a, gb_b));
  });

  for (DType half : {DType::bf16, DType::f16})
    for (bool reference : {false, true})
      for (int64_t C : {4, 3}) {  // every channel of x, and its first 3 of 4
        CAPTURE(dtype_name(half));
        CAPTURE(reference);
        CAPTURE(C);
        Context ctx = reference ? Context::ref() : Context::cpu(2);
        ctx.compute = half;
        const Tensor xh = rounded(randn({3, 4, 5, 6}, 61, 2.f, 0.5f), half), x32 = xh.cast(DType::f32);
        Tensor gamma = randn({C}, 62), beta = randn({C}, 63);
        Tensor y_a = Tensor::empty({3, C, 5, 6}), y_b = Tensor::empty({3, C, 5, 6});
        Tensor m_a = Tensor::empty({C}), s_a = Tensor::empty({C}), m_b = Tensor::empty({C}), s_b = Tensor::empty({C});
        Tensor rm_a = Tensor::zeros({C}), rv_a = Tensor::zeros({C}), rm_b = Tensor::zeros({C}), rv_b = Tensor::zeros({C});
        ops::batch_norm_forward_train(ctx, y_a, m_a, s_a, rm_a, rv_a, xh, gamma, beta, 0.1f, 1e-5f, nullptr,
                                      ops::Epilogue::relu);
        ops::batch_norm_forward_train(ctx, y_b, m_b, s_b, rm_b, rv_b, x32, gamma, beta, 0.1f, 1e-5f, nullptr,
                                      ops::Epilogue::relu);
        CHECK(bitwise_equal(y_a, y_b));
        CHECK(bitwise_equal(m_a, m_b));
        CHECK(bitwise_equal(s_a, s_b));
        CHECK(bitwise_equal(rm_a, rm_b));
        CHECK(bitwise_equal(rv_a, rv_b));
        // A half y (the activated output a convolution reads next): the fp32 y rounded.
        Tensor yh = Tensor::empty({3, C, 5, 6}, half);
        ops::batch_norm_forward_train(ctx, yh, m_a, s_a, rm_a, rv_a, xh, gamma, beta, 0.f, 1e-5f, nullptr,
                                      ops::Epilogue::relu);
        CHECK(bitwise_equal(yh, rounded(y_b, half)));
        ops::batch_norm_forward_eval(ctx, y_a, xh, gamma, beta, rm_a, rv_a, 1e-5f, ops::Epilogue::none);
        ops::batch_norm_forward_eval(ctx, y_b, x32, gamma, beta, rm_b, rv_b, 1e-5f, ops::Epilogue::none);
        CHECK(bitwise_equal(y_a, y_b));
        Tensor yh_eval = Tensor::empty({3, C, 5, 6}, half);
        ops::batch_norm_forward_eval(ctx, yh_eval, xh, gamma, beta, rm_a, rv_a, 1e-5f, ops::Epilogue::none);
        CHECK(bitwise_equal(yh_eval, rounded(y_b, half)));
        // dx in x's half dtype is the fp32 dx rounded; the gradients of gamma and beta alike. The
        // channels past C keep their values (here: what dx held). A folded ReLU's output may be
        // half too (before a convolution): read widened.
        const Tensor dy = randn({3, C, 5, 6}, 64);
        Tensor dxh = rounded(randn({3, 4, 5, 6}, 65), half), dx32 = Tensor::empty({3, 4, 5, 6});
        dx32.copy_from(dxh.cast(DType::f32));
        Tensor dg_a = Tensor::zeros({C}), db_a = Tensor::zeros({C}), dg_b = Tensor::zeros({C}), db_b = Tensor::zeros({C});
        ops::batch_norm_backward(ctx, &dxh, &dg_a, &db_a, dy, xh, gamma, m_a, s_a, ops::DxMode::overwrite, &yh, nullptr);
        const Tensor relu32 = yh.cast(DType::f32);
        ops::batch_norm_backward(ctx, &dx32, &dg_b, &db_b, dy, x32, gamma, m_b, s_b, ops::DxMode::overwrite, &relu32,
                                 nullptr);
        CHECK(bitwise_equal(dxh, rounded(dx32, half)));
        CHECK(bitwise_equal(dg_a, dg_b));
        CHECK(bitwise_equal(db_a, db_b));
        // A half dy (the dx of the convolution after it, cuDNN's result as it is): every gradient
        // that of its widened values, with the ReLU's mask and with none, added into dx too.
        const Tensor dyh = rounded(dy, half), dyw = dyh.cast(DType::f32);
        for (const Tensor* out : {static_cast<const Tensor*>(&yh), static_cast<const Tensor*>(nullptr)}) {
          CAPTURE(out != nullptr);
          Tensor da = poisoned({3, 4, 5, 6}), dw = poisoned({3, 4, 5, 6});
          Tensor ga = Tensor::zeros({C}), ba = Tensor::zeros({C}), gw = Tensor::zeros({C}), bw = Tensor::zeros({C});
          ops::batch_norm_backward(ctx, &da, &ga, &ba, dyh, x32, gamma, m_b, s_b, ops::DxMode::overwrite, out, nullptr);
          ops::batch_norm_backward(ctx, &dw, &gw, &bw, dyw, x32, gamma, m_b, s_b, ops::DxMode::overwrite, out, nullptr);
          CHECK(bitwise_equal(da, dw));
          CHECK(bitwise_equal(ga, gw));
          CHECK(bitwise_equal(ba, bw));
          Tensor held_a = randn({3, 4, 5, 6}, 66), held_w = held_a.clone();
          ops::batch_norm_backward(ctx, &held_a, nullptr, nullptr, dyh, x32, gamma, m_b, s_b, ops::DxMode::add, out,
                                   nullptr);
          ops::batch_norm_backward(ctx, &held_w, nullptr, nullptr, dyw, x32, gamma, m_b, s_b, ops::DxMode::add, out,
                                   nullptr);
          CHECK(bitwise_equal(held_a, held_w));
        }
      }
}

TEST_CASE("half-precision maps: refused without half compute, in another dtype, or added to") {
  Context ctx = Context::cpu();
  Tensor x = randn({2, 3, 4, 4}, 71), w = randn({4, 3, 1, 1}, 72);
  Tensor yh = Tensor::empty({2, 4, 4, 4}, DType::bf16);
  ops::Conv2dParams p;
  CHECK_THROWS_WITH_AS(ops::conv2d_forward(ctx, yh, x, w, nullptr, p),
                       doctest::Contains("y (2, 4, 4, 4) must be f32 (half-precision maps need --precision bf16 or "
                                         "fp16), got bf16"),
                       Error);
  ctx.compute = DType::f16;
  CHECK_THROWS_WITH_AS(ops::conv2d_forward(ctx, yh, x, w, nullptr, p),
                       doctest::Contains("must be f32 or f16 (the compute's precision), got bf16"), Error);
  ctx.compute = DType::bf16;
  // A batch norm's dx has its x's dtype.
  Tensor c4 = Tensor::from({4}, {1, 1, 1, 1}), dy = randn({2, 4, 4, 4}, 74), dx32 = Tensor::empty({2, 4, 4, 4});
  CHECK_THROWS_WITH_AS(
      ops::batch_norm_backward(ctx, &dx32, nullptr, nullptr, dy, yh, c4, c4, c4, ops::DxMode::overwrite, nullptr,
                               nullptr),
      doctest::Contains("batch_norm_backward: dx (2, 4, 4, 4) must be bf16, got f32"), Error);
  // Its dy may be in the compute's half type, not another.
  Tensor dy16 = dy.cast(DType::f16), dxh = Tensor::empty({2, 4, 4, 4}, DType::bf16);
  CHECK_THROWS_WITH_AS(
      ops::batch_norm_backward(ctx, &dxh, nullptr, nullptr, dy16, yh, c4, c4, c4, ops::DxMode::overwrite, nullptr,
                               nullptr),
      doctest::Contains("batch_norm_backward: dy (2, 4, 4, 4) must be f32 or bf16"), Error);
  // A ReLU's half dx (the dy of the convolution before it) is written over, never added to, and
  // in the compute's half type.
  Tensor rdx = Tensor::empty({2, 4, 4, 4}, DType::bf16);
  CHECK_THROWS_WITH_AS(ops::relu_backward(ctx, rdx, dy, yh, ops::DxMode::add),
                       doctest::Contains("relu_backward: a bf16 dx is written over (DxMode::overwrite), never added to"),
                       Error);
  Tensor rdx16 = Tensor::empty({2, 4, 4, 4}, DType::f16);
  CHECK_THROWS_WITH_AS(ops::relu_backward(ctx, rdx16, dy, yh, ops::DxMode::overwrite),
                       doctest::Contains("relu_backward: dx (2, 4, 4, 4) must be f32 or bf16"), Error);
  CHECK_THROWS_WITH_AS(ops::relu_backward(ctx, dx32, rdx16, yh, ops::DxMode::overwrite),
                       doctest::Contains("relu_backward: dy (2, 4, 4, 4) must be f32 or bf16"), Error);
  // So is a convolution's half dx (the dy of a ReLU before it).
  Tensor cdx = Tensor::empty({2, 3, 4, 4}, DType::bf16), cdy = randn({2, 4, 4, 4}, 75);
  CHECK_THROWS_WITH_AS(ops::conv2d_backward(ctx, &cdx, nullptr, nullptr, cdy, x, w, p, ops::DxMode::add),
                       doctest::Contains("conv2d_backward: a bf16 dx is written over (DxMode::overwrite), never added to"),
                       Error);
  Tensor cdx16 = Tensor::empty({2, 3, 4, 4}, DType::f16);
  CHECK_THROWS_WITH_AS(ops::conv2d_backward(ctx, &cdx16, nullptr, nullptr, cdy, x, w, p, ops::DxMode::overwrite),
                       doctest::Contains("conv2d_backward: dx (2, 3, 4, 4) must be f32 or bf16"), Error);
}
