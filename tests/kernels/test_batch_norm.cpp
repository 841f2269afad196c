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

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;
using dpx::testing::randn;

TEST_CASE("batch_norm train (N, C): hand values and running stats after two steps") {
  Context ctx = Context::cpu();
  // Channel 0 holds 1..4 (mean 2.5, biased var 1.25, unbiased 5/3); channel 1 ten times that.
  Tensor x = Tensor::from({4, 2}, {1, 10, 2, 20, 3, 30, 4, 40});
  Tensor gamma = Tensor::from({2}, {1, 2}), beta = Tensor::from({2}, {0, 1});
  Tensor rm = Tensor::from({2}, {0, 0}), rv = Tensor::from({2}, {1, 1});
  Tensor mean = Tensor::empty({2}), invstd = Tensor::empty({2}), y = Tensor::empty({4, 2});
  ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, ops::Epilogue::none);
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
  ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x2, gamma, beta, 0.1f, 1e-5f, ops::Epilogue::none);
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
  ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.2f, 1e-3f, ops::Epilogue::none);

  // The reference kernel (kernels/ref/batch_norm.cpp), from the same running stats.
  Context rctx = Context::cpu();
  Tensor want_rm = Tensor::from({C}, rm0), want_rv = Tensor::from({C}, rv0);
  Tensor want_y = Tensor::empty(x.shape()), want_mean = Tensor::empty({C}), want_invstd = Tensor::empty({C});
  ref::batch_norm_forward_train(rctx, want_y, want_mean, want_invstd, want_rm, want_rv, x, gamma, beta,
                                0.2f, 1e-3f, ops::Epilogue::none);
  check_close(y, want_y);
  check_close(mean, want_mean);
  check_close(invstd, want_invstd);
  check_close(rm, want_rm);
  check_close(rv, want_rv);

  ops::batch_norm_forward_eval(ctx, y, x, gamma, beta, rm, rv, 1e-3f, ops::Epilogue::none);
  ref::batch_norm_forward_eval(rctx, want_y, x, gamma, beta, rm, rv, 1e-3f, ops::Epilogue::none);
  check_close(y, want_y);
}

TEST_CASE("batch_norm backward: centred differences of sum(r * y), and accumulation") {
  Context ctx = Context::cpu();
  const int64_t N = 3, C = 2;
  Tensor x = randn({N, C, 2, 2}, 5, 2.f), gamma = randn({C}, 6), beta = randn({C}, 7);
  Tensor r = randn(x.shape(), 8);
  Tensor rm = Tensor::zeros({C}), rv = Tensor::zeros({C});
  Tensor mean = Tensor::empty({C}), invstd = Tensor::empty({C}), y = Tensor::empty(x.shape());
  auto loss = [&]() {
    ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, ops::Epilogue::none);
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
    ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, ops::Epilogue::none);
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
  CHECK_THROWS_WITH_AS(ops::batch_norm_forward_train(ctx, y, m, s, rm, rv, x, c3, c3, 0.1f, 1e-5f, ops::Epilogue::none),
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
  ops::batch_norm_forward_train(ctx, f.plain, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, ops::Epilogue::none);
  activation(ctx, want, f.plain);
  ops::batch_norm_forward_train(ctx, f.fused, mean, invstd, rm2, rv2, x, gamma, beta, 0.1f, 1e-5f, epilogue);
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
    ops::batch_norm_forward_train(ctx, want, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, ops::Epilogue::relu);
    ops::batch_norm_forward_train(ctx, got, mean2, invstd2, rm2, rv2, buf, gamma, beta, 0.1f, 1e-5f,
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
