// core/: Tensor views and copies, dtype conversions, device and dtype parsing, the Philox RNG
// (known-answer vectors of Random123) and the phase timer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "core/device.hpp"
#include "core/phase_timer.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;

TEST_CASE("Philox-4x32-10 matches Random123's known-answer vectors") {
  auto zero = philox4x32(0, 0, 0);
  CHECK(zero[0] == 0x6627e8d5u);
  CHECK(zero[1] == 0xe169c58du);
  CHECK(zero[2] == 0xbc57ac4cu);
  CHECK(zero[3] == 0x9b00dbd8u);
  auto ones = philox4x32(~0ull, ~0ull, ~0ull);
  CHECK(ones[0] == 0x408f276du);
  CHECK(ones[1] == 0x41c83b0eu);
  CHECK(ones[2] == 0xa20bc7c6u);
  CHECK(ones[3] == 0x6d5451fdu);
}

TEST_CASE("the RNG depends on seed, stream and counter only") {
  Rng a(42), b(42), c(43);
  Tensor x = Tensor::empty({1000}), y = Tensor::empty({1000}), z = Tensor::empty({1000});
  fill_uniform(x, a, -1.f, 1.f);
  fill_uniform(y, b, -1.f, 1.f);
  fill_uniform(z, c, -1.f, 1.f);
  CHECK(x.to_vector() == y.to_vector());
  CHECK(x.to_vector() != z.to_vector());
  // Element i of a fill is counter (offset + i): any thread computing it gets the same value.
  Rng d(42);
  CHECK(d.uniform_at(7) * 2.f - 1.f == doctest::Approx(x.to_vector()[7]));
  Tensor n = Tensor::empty({20000});
  Rng e(5);
  fill_normal(n, e, 0.f, 1.f);
  const dpx::testing::Moments m = dpx::testing::moments(n);
  CHECK(std::abs(m.mean) < 0.03);
  CHECK(m.var == doctest::Approx(1.0).epsilon(0.05));
  Tensor t = Tensor::empty({5000});
  fill_trunc_normal(t, e, 0.f, 1.f, -2.f, 2.f);
  for (float v : t.to_vector()) CHECK((v >= -2.f && v <= 2.f));
  auto p = permutation(100, e);
  std::vector<int64_t> sorted(p);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) CHECK(sorted[i] == i);
}

TEST_CASE("Tensor: slices and views share storage; bounds are checked") {
  Tensor t = Tensor::from({4, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Tensor rows = t.slice(1, 3);
  CHECK(rows.shape() == Shape{2, 3});
  CHECK(rows.to_vector() == std::vector<float>{3, 4, 5, 6, 7, 8});
  rows.data<float>()[0] = 100;
  CHECK(t.to_vector()[3] == 100);
  CHECK(t.view({-1}).shape() == Shape{12});
  CHECK(t.view({2, -1}).shape() == Shape{2, 6});
  CHECK(t.view_at(5, {2, 2}).to_vector() == std::vector<float>{5, 6, 7, 8});
  CHECK_THROWS_AS(t.slice(3, 5), Error);
  CHECK_THROWS_AS(t.view({5, -1}), Error);
  CHECK_THROWS_AS(t.view_at(10, {3}), Error);
  CHECK_THROWS_AS(t.data<double>(), Error);
  CHECK_THROWS_AS(Tensor::from({2, 2}, {1, 2, 3}), Error);
  Tensor c = t.clone();
  c.data<float>()[0] = -1;
  CHECK(t.to_vector()[0] == 0);
  Tensor empty = Tensor::zeros({0, 3});
  CHECK(empty.numel() == 0);
  CHECK(empty.slice(0, 0).numel() == 0);
  CHECK(t.size(-1) == 3);
}

TEST_CASE("half and bfloat16 conversions round to nearest even and keep specials") {
  CHECK(half_to_float(float_to_half(1.0f)) == 1.0f);
  CHECK(float_to_half(65504.f) == 0x7BFF);
  CHECK(float_to_half(1e6f) == 0x7C00);                           // overflow to infinity
  CHECK(half_to_float(float_to_half(5.9604645e-8f)) == 5.9604645e-8f);  // smallest subnormal
  CHECK(float_to_half(1.0f + 1.0f / 2048) == 0x3C00);             // a tie rounds to even
  CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(bf16_to_float(float_to_bf16(-2.5f)) == -2.5f);
  CHECK(float_to_bf16(1.0f + 1.0f / 256) == 0x3F80);              // a tie rounds to even
  Tensor t = Tensor::from({3}, {0.5f, -3.25f, 1000.f});
  for (DType d : {DType::f16, DType::bf16, DType::f64})
    CHECK(t.cast(d).cast(DType::f32).to_vector() == t.to_vector());
  Tensor whole = Tensor::from({3}, {7.f, -3.f, 1000.f});
  for (DType d : {DType::i32, DType::i64}) CHECK(whole.cast(d).cast(DType::f32).to_vector() == whole.to_vector());
  CHECK(t.cast(DType::i32).to_vector() == std::vector<float>{0.f, -3.f, 1000.f});  // truncates, as C++
}

TEST_CASE("devices and dtypes parse, and say what they accept") {
  CHECK(parse_device("cpu").is_cpu());
  CHECK(parse_device("cuda:3").index == 3);
  CHECK(parse_device("cuda") == Device::cuda(0));
  CHECK_THROWS_WITH_AS(parse_device("gpu:1"), doctest::Contains("use cpu or cuda:N"), UsageError);
  CHECK_THROWS_AS(parse_device("cuda:-1"), UsageError);
  CHECK(parse_dtype("bfloat16") == DType::bf16);
  CHECK_THROWS_WITH_AS(parse_dtype("f8"), doctest::Contains("f32, f64, f16, bf16"), UsageError);
}

TEST_CASE("the phase timer adds scoped time to a phase and starts a new step on take") {
  PhaseTimer timer;
  {
    auto s = timer.scope(Phase::forward);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  timer.add(Phase::forward, 1.0);
  StepTimes t = timer.take();
  CHECK(t[Phase::forward] >= 1.004);
  CHECK(t[Phase::backward] == 0);
  CHECK(timer.current()[Phase::forward] == 0);
  CHECK(phase_name(Phase::comm_exposed) == "comm_exposed");
}

TEST_CASE("a phase scope opened inside another takes its time out of the outer one") {
  PhaseTimer timer;
  {
    auto outer = timer.scope(Phase::forward);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    {
      auto inner = timer.scope(Phase::comm_total);
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
    }
  }
  StepTimes t = timer.take();
  CHECK(t[Phase::comm_total] >= 0.060);
  CHECK(t[Phase::forward] >= 0.002);
  CHECK(t[Phase::forward] < 0.050);  // the inner 60 ms counted once, in comm_total
}

// dpx models builds every zoo model only to count it: DrawNothing makes the fills zeros, and the
// generator advances as if it had drawn, so what is drawn after the scope is what it would be.
TEST_CASE("DrawNothing: fills write zeros, the generator moves on as if they had drawn") {
  Rng drawn(5), skipped(5);
  Tensor a = Tensor::empty({1000}), b = Tensor::empty({1000}), c = Tensor::empty({300});
  fill_normal(a, drawn, 0.f, 1.f);
  {
    DrawNothing zeros;
    {
      DrawNothing nested;  // scopes nest: the inner one's end keeps the outer one's effect
    }
    fill_normal(b, skipped, 0.f, 1.f);
    fill_uniform(c, skipped, -1.f, 1.f);
    fill_trunc_normal(c, skipped, 0.f, 1.f, -2.f, 2.f);
  }
  for (float v : b.to_vector()) CHECK(v == 0.f);
  for (float v : c.to_vector()) CHECK(v == 0.f);
  fill_uniform(c, drawn, -1.f, 1.f);
  fill_trunc_normal(c, drawn, 0.f, 1.f, -2.f, 2.f);
  Tensor after_drawn = Tensor::empty({10}), after_skipped = Tensor::empty({10});
  fill_normal(after_drawn, drawn, 0.f, 1.f);
  fill_normal(after_skipped, skipped, 0.f, 1.f);
  CHECK(after_drawn.to_vector() == after_skipped.to_vector());
  CHECK(after_skipped.to_vector()[0] != 0.f);  // drawing again once the scope is gone
}
