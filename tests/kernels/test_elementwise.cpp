// Tests of the CPU elementwise ops, ReLU and dropout: hand values, backward accumulating,
// dropout's mask drawn from the documented counter (the same for 1 and 2 threads), clear errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.hpp"
#include "kernels/ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;
using dpx::testing::randn;

TEST_CASE("fill, copy, add, axpy, scale: hand values") {
  Context ctx = Context::cpu(2);
  Tensor a = Tensor::from({2, 2}, {1, 2, 3, 4}), b = Tensor::from({4}, {10, 20, 30, 40});
  Tensor out = Tensor::empty({2, 2});
  ops::fill(ctx, out, 7.f);
  check_close(out, {7, 7, 7, 7});
  ops::add(ctx, out, a, b);
  check_close(out, {11, 22, 33, 44});
  ops::axpy(ctx, out, -2.f, a);
  check_close(out, {9, 18, 27, 36});
  ops::scale(ctx, out, 0.5f);
  check_close(out, {4.5, 9, 13.5, 18});
  ops::copy(ctx, out, b);
  check_close(out, {10, 20, 30, 40});
  Tensor labels = dpx::testing::labels_from({3, 1, 4}), labels_copy = Tensor::empty({3}, DType::i64);
  ops::copy(ctx, labels_copy, labels);
  CHECK(bitwise_equal(labels, labels_copy));
}

TEST_CASE("elementwise ops on large tensors match for 1 and 2 threads") {
  const int64_t n = 100003;  // odd, so thread chunks end in the middle of vectors
  Tensor a = randn({n}, 1), b = randn({n}, 2);
  auto run = [&](int threads) {
    Context ctx = Context::cpu(threads);
    Tensor out = Tensor::empty({n});
    ops::add(ctx, out, a, b);
    ops::axpy(ctx, out, 0.3f, a);
    ops::scale(ctx, out, 1.7f);
    return out;
  };
  Tensor one = run(1), two = run(2);
  CHECK(bitwise_equal(one, two));
  auto av = a.to_vector(), bv = b.to_vector(), ov = one.to_vector();
  for (int64_t i = 0; i < n; i += 997)
    CHECK(ov[i] == doctest::Approx((av[i] + bv[i] + 0.3f * av[i]) * 1.7f));
}

TEST_CASE("elementwise ops: size and dtype mismatches are errors") {
  Context ctx = Context::cpu();
  Tensor a = Tensor::zeros({3}), b = Tensor::zeros({4}), out = Tensor::zeros({3});
  CHECK_THROWS_WITH_AS(ops::add(ctx, out, a, b), doctest::Contains("add: out (3) and b (4)"),
                       Error);
  Tensor i = Tensor::zeros({3}, DType::i64);
  CHECK_THROWS_WITH_AS(ops::copy(ctx, out, i), doctest::Contains("copy: out is f32 but in is i64"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::fill(ctx, i, 1.f), doctest::Contains("fill: out (3) must be f32"),
                       Error);
}

TEST_CASE("relu: forward keeps positives, backward uses the output and accumulates") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::from({5}, {-2, -0.f, 0.5f, 3, -1});
  Tensor y = Tensor::empty({5});
  ops::relu_forward(ctx, y, x);
  check_close(y, {0, 0, 0.5, 3, 0});
  Tensor dy = Tensor::from({5}, {1, 2, 3, 4, 5});
  Tensor dx = Tensor::from({5}, {10, 10, 10, 10, 10});
  ops::relu_backward(ctx, dx, dy, y, ops::DxMode::add);
  check_close(dx, {10, 10, 13, 14, 10});
  ops::relu_backward(ctx, dx, dy, y, ops::DxMode::add);
  check_close(dx, {10, 10, 16, 18, 10});
  ops::relu_backward(ctx, dx, dy, y, ops::DxMode::overwrite);  // written over, zeros included
  check_close(dx, {0, 0, 3, 4, 0});
}

TEST_CASE("add_relu: relu_forward of add's output bit for bit, NaN passing; any threads; half maps; its errors") {
  // A residual join and its ReLU in one pass (ResNet's blocks): the two ops' bits, on an odd size
  // whose thread chunks end inside vectors, with NaN, infinities, -0 and values that cancel.
  const int64_t n = 100003;
  Tensor a = randn({n}, 3), b = randn({n}, 4);
  float* ap = a.data<float>();
  float* bp = b.data<float>();
  ap[5] = std::numeric_limits<float>::quiet_NaN();
  ap[6] = std::numeric_limits<float>::infinity();
  bp[7] = -std::numeric_limits<float>::infinity();
  ap[8] = -0.f, bp[8] = -0.f;
  bp[9] = -ap[9];
  Context one = Context::cpu(1);
  Tensor sum = Tensor::empty({n}), want = Tensor::empty({n});
  ops::add(one, sum, a, b);
  ops::relu_forward(one, want, sum);
  for (int threads : {1, 2}) {
    Context ctx = Context::cpu(threads);
    Tensor out = Tensor::empty({n});
    ops::add_relu(ctx, out, a, b);
    CHECK(bitwise_equal(out, want));
  }
  CHECK(std::isnan(want.data<float>()[5]));
  // Under --precision bf16 out and b may be bf16: the fp32 op on b widened, out rounded.
  Context half = Context::cpu(2);
  half.compute = DType::bf16;
  Tensor bh = b.cast(DType::bf16), out_h = Tensor::empty({n}, DType::bf16), out32 = Tensor::empty({n});
  ops::add_relu(half, out_h, a, bh);
  ops::add_relu(one, out32, a, bh.cast(DType::f32));
  CHECK(bitwise_equal(out_h, out32.cast(DType::bf16)));
  // Sizes, and a half map without half compute.
  Tensor short_b = Tensor::zeros({3}), out3 = Tensor::zeros({4}), a4 = Tensor::zeros({4});
  CHECK_THROWS_WITH_AS(ops::add_relu(one, out3, a4, short_b), doctest::Contains("add_relu: out (4) and b (3)"), Error);
  Tensor b4h = Tensor::zeros({4}, DType::bf16);
  CHECK_THROWS_WITH_AS(ops::add_relu(one, out3, a4, b4h),
                       doctest::Contains("add_relu: b (4) must be f32 (half-precision maps need --precision"), Error);
}

TEST_CASE("dropout: mask from Rng(seed, stream) counter i, scaled by 1/(1-p), any threads") {
  const int64_t n = 200000;
  const float p = 0.3f;
  Tensor x = randn({n}, 3);
  auto run = [&](int threads) {
    Context ctx = Context::cpu(threads);
    Tensor y = Tensor::empty({n}), mask = Tensor::empty({n}, DType::u8);
    ops::dropout_forward(ctx, y, mask, x, p, 42, 7);
    return std::pair{y, mask};
  };
  auto [y1, m1] = run(1);
  auto [y2, m2] = run(2);
  CHECK(bitwise_equal(m1, m2));
  CHECK(bitwise_equal(y1, y2));

  const Rng rng(42, 7);
  const uint8_t* m = m1.data<uint8_t>();
  const float *xv = x.data<float>(), *yv = y1.data<float>();
  int64_t kept = 0, wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = rng.uniform_at(static_cast<uint64_t>(i)) >= p;
    kept += keep;
    wrong += (m[i] != keep) || (yv[i] != (keep ? xv[i] * (1.f / (1.f - p)) : 0.f));
  }
  CHECK(wrong == 0);
  CHECK(static_cast<double>(kept) / n == doctest::Approx(1.0 - p).epsilon(0.01));

  // A different stream gives a different mask.
  Context ctx = Context::cpu();
  Tensor y3 = Tensor::empty({n}), m3 = Tensor::empty({n}, DType::u8);
  ops::dropout_forward(ctx, y3, m3, x, p, 42, 8);
  CHECK_FALSE(bitwise_equal(m1, m3));

  // Backward: dx += dy * mask / (1 - p), twice.
  Tensor dy = randn({n}, 4), dx = Tensor::zeros({n});
  ops::dropout_backward(ctx, dx, dy, m1, p);
  ops::dropout_backward(ctx, dx, dy, m1, p);
  const float* dyv = dy.data<float>();
  const float* dxv = dx.data<float>();
  wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float once = m[i] ? dyv[i] * (1.f / (1.f - p)) : 0.f;
    wrong += dxv[i] != once + once;
  }
  CHECK(wrong == 0);
}

TEST_CASE("dropout: p == 0 copies, p == 1 zeroes, p outside 0..1 is an error") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::from({4}, {1, -2, 3, -4});
  Tensor y = Tensor::empty({4}), mask = Tensor::empty({4}, DType::u8);
  ops::dropout_forward(ctx, y, mask, x, 0.f, 1, 0);
  CHECK(bitwise_equal(y, x));
  check_close(mask, {1, 1, 1, 1});
  ops::dropout_forward(ctx, y, mask, x, 1.f, 1, 0);
  check_close(y, {0, 0, 0, 0});
  check_close(mask, {0, 0, 0, 0});
  CHECK_THROWS_WITH_AS(ops::dropout_forward(ctx, y, mask, x, 1.5f, 1, 0),
                       doctest::Contains("dropout probability 1.5"), Error);
  Tensor bad_mask = Tensor::empty({4});
  CHECK_THROWS_WITH_AS(ops::dropout_forward(ctx, y, bad_mask, x, 0.5f, 1, 0),
                       doctest::Contains("mask (4) must be u8, got f32"), Error);
}

TEST_CASE("random ops add ctx.random_offset to their stream: a graph replay draws its own step's masks") {
  const int64_t n = 1000;
  const Tensor x = randn({n}, 3);
  Tensor offset = Tensor::zeros({1}, DType::i64);
  offset.data<int64_t>()[0] = 5;
  for (Context ctx : {Context::cpu(2), Context::ref()}) {
    Tensor y = Tensor::empty({n}), m = Tensor::empty({n}, DType::u8), y_at = Tensor::empty({n}),
           m_at = Tensor::empty({n}, DType::u8);
    ops::dropout_forward(ctx, y_at, m_at, x, 0.3f, 42, 12);  // stream 7 + 5 without an offset
    ctx.random_offset = &offset;
    ops::dropout_forward(ctx, y, m, x, 0.3f, 42, 7);
    CHECK(bitwise_equal(m, m_at));
    CHECK(bitwise_equal(y, y_at));
    Tensor noise = Tensor::empty({n}), noise_at = Tensor::empty({n});
    ops::bernoulli_scale(ctx, noise, 0.8f, 42, 7);
    ctx.random_offset = nullptr;
    ops::bernoulli_scale(ctx, noise_at, 0.8f, 42, 12);
    CHECK(bitwise_equal(noise, noise_at));
    Tensor wrong = Tensor::zeros({2}, DType::i64);
    ctx.random_offset = &wrong;
    CHECK_THROWS_WITH_AS(ops::bernoulli_scale(ctx, noise, 0.8f, 42, 7),
                         doctest::Contains("ctx.random_offset must be one i64 on cpu"), Error);
  }
}

TEST_CASE("bernoulli_scale draws torch's bernoulli(keep) / keep from (seed, stream), thread count aside") {
  const int64_t n = 4000;
  const Rng rng(9, 4);
  for (float keep : {0.8f, 0.25f, 1.f, 0.f}) {
    CAPTURE(keep);
    Tensor a = Tensor::empty({n}), b = Tensor::empty({n}), r = Tensor::empty({n});
    Context one = Context::cpu(1), three = Context::cpu(3), ref = Context::ref();
    ops::bernoulli_scale(one, a, keep, 9, 4);
    ops::bernoulli_scale(three, b, keep, 9, 4);
    ops::bernoulli_scale(ref, r, keep, 9, 4);
    CHECK(bitwise_equal(a, b));
    CHECK(bitwise_equal(a, r));
    int64_t wrong = 0, kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool k = rng.uniform_at(static_cast<uint64_t>(i)) < keep;
      kept += k;
      wrong += a.data<float>()[i] != (k ? 1.f / keep : 0.f);
    }
    CHECK(wrong == 0);
    CHECK(static_cast<double>(kept) / n == doctest::Approx(keep).epsilon(0.03));
  }
  Context ctx = Context::cpu();
  Tensor out = Tensor::empty({3});
  CHECK_THROWS_WITH_AS(ops::bernoulli_scale(ctx, out, 1.5f, 1, 0),
                       doctest::Contains("bernoulli_scale: keep = 1.5 is not a probability"), Error);
}

TEST_CASE("increment_i64 adds one to a one-element i64 counter, on the CPU and in the reference; else says what it takes") {
  for (Context ctx : {Context::cpu(2), Context::ref()}) {
    Tensor counter = Tensor::zeros({}, DType::i64);
    counter.data<int64_t>()[0] = (int64_t(1) << 40) - 1;  // beyond 32 bits
    ops::increment_i64(ctx, counter);
    ops::increment_i64(ctx, counter);
    CHECK(counter.data<int64_t>()[0] == (int64_t(1) << 40) + 1);
  }
  Context ctx = Context::cpu();
  Tensor f = Tensor::zeros({});
  CHECK_THROWS_WITH_AS(ops::increment_i64(ctx, f), doctest::Contains("counter"), Error);
  Tensor two = Tensor::zeros({2}, DType::i64);
  CHECK_THROWS_WITH_AS(ops::increment_i64(ctx, two), doctest::Contains("exactly one element"), Error);
}

TEST_CASE("poison_if_nonfinite makes x NaN where the value is NaN or infinite, and leaves it else; else says what it takes") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (Context ctx : {Context::cpu(2), Context::ref()}) {
    for (float v : {0.f, -3.5f, std::numeric_limits<float>::max(), inf, -inf, nan}) {
      CAPTURE(v);
      Tensor x = Tensor::empty({5, 1001});
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i) - 7.f;
      const Tensor before = x.clone();
      Tensor value = Tensor::empty({1});
      value.data<float>()[0] = v;
      ops::poison_if_nonfinite(ctx, x, value);
      if (std::isfinite(v)) {
        CHECK(x.to_vector() == before.to_vector());
      } else {
        CHECK(ops::count_nonfinite(ctx, x) == x.numel());
        CHECK(std::isnan(x.data<float>()[x.numel() - 1]));
      }
    }
  }
  Context ctx = Context::cpu();
  Tensor x = Tensor::zeros({3}), two = Tensor::zeros({2});
  CHECK_THROWS_WITH_AS(ops::poison_if_nonfinite(ctx, x, two), doctest::Contains("exactly one element"), Error);
  Tensor i = Tensor::zeros({1}, DType::i64);
  CHECK_THROWS_WITH_AS(ops::poison_if_nonfinite(ctx, x, i), doctest::Contains("value"), Error);
}

TEST_CASE("count_nonfinite counts NaN and both infinities, nothing else, for any number of threads") {
  const int64_t n = 100003;
  Tensor x = Tensor::empty({n});
  float* p = x.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 97) - 48.f;
  p[0] = std::numeric_limits<float>::quiet_NaN();
  p[5] = std::numeric_limits<float>::infinity();
  p[n - 1] = -std::numeric_limits<float>::infinity();
  p[7] = std::numeric_limits<float>::max();           // finite extremes are not counted
  p[8] = std::numeric_limits<float>::denorm_min();
  p[9] = -0.f;
  for (int threads : {1, 2, 3}) {
    Context ctx = Context::cpu(threads);
    CHECK(ops::count_nonfinite(ctx, x) == 3);
    CHECK(ops::count_nonfinite(ctx, x.view_at(1, {4})) == 0);
  }
  Context ctx = Context::cpu();
  Tensor ints = Tensor::empty({3}, DType::i64);
  CHECK_THROWS_AS(ops::count_nonfinite(ctx, ints), Error);  // f32 only, said
}

TEST_CASE("cast: f32 to bf16 and f16 rounds to nearest even after the scale, and back; cpu (1, 2 threads) = ref") {
  // 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7: ties go to the even 1. 1 + 3 * 2^-8 goes
  // up to 1 + 2^-6. In f16 (10 bits) the halfway case is 1 + 2^-11.
  const std::vector<float> values = {1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f, 1.f + 0x1p-11f, -2.5f, -0.f, 65504.f * 4,
                                     std::numeric_limits<float>::infinity(), 1e-30f};
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor x = Tensor::from({n}, values);
  for (DType half : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(half));
    for (float alpha : {1.f, 0.25f}) {
      Tensor h = Tensor::empty({n}, half), back = Tensor::empty({n});
      Context ctx = Context::cpu(1);
      ops::cast(ctx, h, x, alpha);
      const auto* bits = static_cast<const uint16_t*>(h.raw());
      for (int64_t i = 0; i < n; ++i) {
        const float v = values[static_cast<size_t>(i)] * alpha;
        CHECK(bits[i] == (half == DType::bf16 ? float_to_bf16(v) : float_to_half(v)));
      }
      ops::cast(ctx, back, h, 2.f);
      for (int64_t i = 0; i < n; ++i)
        CHECK(back.data<float>()[i] == 2.f * (half == DType::bf16 ? bf16_to_float(bits[i]) : half_to_float(bits[i])));
      Context ref = Context::ref();
      Tensor h_ref = Tensor::empty({n}, half), back_ref = Tensor::empty({n});
      ops::cast(ref, h_ref, x, alpha);
      ops::cast(ref, back_ref, h_ref, 2.f);
      CHECK(bitwise_equal(h, h_ref));
      CHECK(bitwise_equal(back, back_ref));
    }
    CHECK(bf16_to_float(float_to_bf16(1.f + 0x1p-8f)) == 1.f);
    CHECK(bf16_to_float(float_to_bf16(1.f + 3 * 0x1p-8f)) == 1.f + 0x1p-6f);
  }
  // -0 stays -0 both ways; 4 * 65504 overflows f16 to infinity.
  Tensor h = Tensor::empty({n}, DType::f16), back = Tensor::empty({n});
  Context ctx = Context::cpu(1);
  ops::cast(ctx, h, x, 1.f);
  ops::cast(ctx, back, h, 1.f);
  CHECK(std::signbit(back.data<float>()[4]));
  CHECK(std::isinf(back.data<float>()[5]));
  // Large: 1 and 2 threads agree bit for bit, f32 -> f32 scales.
  Tensor big = randn({100003}, 3);
  Tensor one = Tensor::empty({100003}, DType::bf16), two = Tensor::empty({100003}, DType::bf16);
  Context c1 = Context::cpu(1), c2 = Context::cpu(2);
  ops::cast(c1, one, big, 0.5f);
  ops::cast(c2, two, big, 0.5f);
  CHECK(bitwise_equal(one, two));
  Tensor scaled = Tensor::empty({100003});
  ops::cast(c2, scaled, big, 0.5f);
  CHECK(scaled.data<float>()[7] == big.data<float>()[7] * 0.5f);
}

TEST_CASE("cast: other dtypes and sizes are errors naming what it takes") {
  Context ctx = Context::cpu();
  Tensor f = Tensor::zeros({3}), h = Tensor::zeros({3}, DType::bf16), g = Tensor::zeros({3}, DType::f16);
  Tensor i = Tensor::zeros({3}, DType::i64), four = Tensor::zeros({4}, DType::bf16);
  CHECK_THROWS_WITH_AS(ops::cast(ctx, i, f, 1.f), doctest::Contains("cast: converts f32 to bf16 or f16 and back"), Error);
  CHECK_THROWS_WITH_AS(ops::cast(ctx, h, g, 1.f), doctest::Contains("not f16 to bf16"), Error);
  CHECK_THROWS_WITH_AS(ops::cast(ctx, four, f, 1.f), doctest::Contains("cast: out (4) and in (3)"), Error);
}
