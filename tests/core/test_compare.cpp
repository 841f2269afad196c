// The tests' own comparisons (tests/common/compare.hpp) must fail on a NaN or an infinity where
// the reference has a number: a comparison that skips them lets a broken kernel pass.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using dpx::Tensor;
using dpx::testing::abs_diff;
using dpx::testing::check_close;
using dpx::testing::closeness;
using dpx::testing::max_abs_diff;
using dpx::testing::max_rel_diff;
using dpx::testing::norm_rel_diff;
using dpx::testing::rel_diff;
using dpx::testing::scaled_error;

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE("a NaN or an infinity where the reference has a number fails any tolerance") {
  const std::vector<double> want = {1.0, -2.0, 3.0};
  for (size_t at = 0; at < want.size(); ++at)  // first, middle and last: no position is skipped
    for (float bad : {kNaN, kInf, -kInf}) {
      std::vector<float> got = {1.f, -2.f, 3.f};
      got[at] = bad;
      CAPTURE(at);
      CAPTURE(bad);
      CHECK_FALSE(max_rel_diff(got, want) <= 1e-5);
      CHECK_FALSE(max_abs_diff(got, want) <= 1e-5);
      CHECK_FALSE(max_rel_diff(want, got) <= 1e-5);  // and a non-finite reference against a number
    }
  CHECK(rel_diff(kInf, -kInf) == kInf);
  CHECK(abs_diff(kNaN, 0.0) == kInf);
}

TEST_CASE("equal values agree, non-finite ones included, and the tolerance is relative") {
  CHECK(max_rel_diff(std::vector<float>{kNaN, kInf, -kInf, 0.f}, std::vector<double>{kNaN, kInf, -kInf, 0.0}) == 0);
  CHECK(rel_diff(1000.0, 1001.0) == doctest::Approx(1.0 / 1001.0));
  CHECK(rel_diff(1e-9, 2e-9) == doctest::Approx(1e-9));    // below the floor of 1: absolute
  CHECK(rel_diff(1e-9, 2e-9, 1e-9) == doctest::Approx(0.5));
  CHECK(max_rel_diff(std::vector<float>{1.f}, std::vector<float>{1.f, 2.f}) == kInf);  // lengths differ
}

// Every comparison that takes whole tensors: a NaN, +inf or -inf at the first, a middle or the
// last element of `got` (or of the reference, against a number) is +infinity, never NaN (which
// passes a check written `!(d > tol)`) and never a small number.
TEST_CASE("norm_rel_diff, scaled_error and the Tensor overloads: a NaN or an infinity is +infinity") {
  const std::vector<float> want = {1.f, -2.f, 3.f, 0.5f};
  for (size_t at : {size_t{0}, size_t{2}, size_t{3}})
    for (float bad : {kNaN, kInf, -kInf}) {
      std::vector<float> got = want;
      got[at] = bad;
      CAPTURE(at);
      CAPTURE(bad);
      CHECK(norm_rel_diff(got, want) == kInf);
      CHECK(norm_rel_diff(want, got) == kInf);  // a non-finite reference against a number
      CHECK(scaled_error(got, want) == kInf);
      CHECK(scaled_error(want, got) == kInf);
      const Tensor g = Tensor::from({4}, got), w = Tensor::from({4}, want);
      CHECK(max_rel_diff(g, w) == kInf);
      CHECK(max_abs_diff(g, w) == kInf);
      CHECK(norm_rel_diff(g, w) == kInf);
      CHECK(scaled_error(g, w) == kInf);
      CHECK_FALSE(closeness(g, w, 1e-5).ok);
      CHECK_FALSE(closeness(got, want, 1e-5).ok);
    }
}

TEST_CASE("norm_rel_diff and scaled_error: equal non-finite values agree and hide no other error") {
  // The same infinity on both sides: (inf - inf)^2 is NaN, inf / inf is NaN; both agree here.
  CHECK(norm_rel_diff(std::vector<float>{kInf, 1.f}, std::vector<float>{kInf, 1.f}) == 0);
  CHECK(norm_rel_diff(std::vector<float>{kNaN, -kInf, 2.f}, std::vector<float>{kNaN, -kInf, 2.f}) == 0);
  CHECK(scaled_error(std::vector<float>{kInf, 1.f}, std::vector<float>{kInf, 1.f}) == 0);
  // An infinity matched in the reference must not become the scale: 4 / inf would pass anything.
  CHECK(scaled_error(std::vector<float>{kInf, 5.f}, std::vector<float>{kInf, 1.f}) == doctest::Approx(4.0));
  CHECK(norm_rel_diff(std::vector<float>{kInf, 5.f}, std::vector<float>{kInf, 1.f}) == doctest::Approx(4.0));
  // Finite values: the usual definitions.
  CHECK(norm_rel_diff(std::vector<float>{3.f, 4.f}, std::vector<float>{0.f, 4.f}) == doctest::Approx(0.75));
  CHECK(norm_rel_diff(std::vector<float>{3.f, 4.f}, std::vector<float>{0.f, 0.f}) == doctest::Approx(5.0));
  CHECK(scaled_error(std::vector<float>{1.f, 2.5f}, std::vector<float>{1.f, 2.f}) == doctest::Approx(0.25));
  CHECK(scaled_error(std::vector<float>{0.f, 1e-3f}, std::vector<float>{0.f, 0.f}, 1e-2) == doctest::Approx(0.1));
  CHECK(norm_rel_diff(std::vector<float>{1.f}, std::vector<float>{1.f, 2.f}) == kInf);  // lengths differ
  CHECK(scaled_error(std::vector<float>{1.f}, std::vector<float>{1.f, 2.f}) == kInf);
}

TEST_CASE("closeness names the worst element, got and want") {
  const auto c = closeness(std::vector<float>{1.f, 2.f, 7.f, kNaN}, std::vector<double>{1.0, 2.0, 3.0, 4.0}, 1e-5);
  CHECK_FALSE(c.ok);
  CHECK(c.worst.index == 3);  // the NaN, not the larger finite difference before it
  CHECK(c.worst.diff == kInf);
  CHECK(c.message.find("at [3] of 4") != std::string::npos);
  CHECK(c.message.find("want 4") != std::string::npos);
  const auto f = closeness(std::vector<float>{1.f, 2.f, 7.f}, std::vector<double>{1.0, 2.0, 3.0}, 1e-5);
  CHECK(f.worst.index == 2);
  CHECK(f.message.find("got 7, want 3") != std::string::npos);
  CHECK(closeness(std::vector<float>{1.f}, std::vector<float>{1.f, 2.f}).message == "got 1 values, want 2");
  CHECK(closeness(std::vector<float>{1.f, 2.f}, std::vector<double>{1.0, 2.0 + 1e-6}).ok);
}

// check_close must fail, once per call, on every non-finite value against a number: 3 positions
// x 3 values x 2 directions = 18 failures, reported (and printed) as expected.
TEST_CASE("check_close fails on a NaN or an infinity (the 18 failures printed are expected)" *
          doctest::expected_failures(18)) {
  const std::vector<double> want = {1.0, -2.0, 3.0};
  for (size_t at = 0; at < want.size(); ++at)
    for (float bad : {kNaN, kInf, -kInf}) {
      std::vector<float> got = {1.f, -2.f, 3.f};
      got[at] = bad;
      check_close(got, want);
      check_close(Tensor::from({3}, std::vector<float>{1.f, -2.f, 3.f}), got);
    }
  check_close(std::vector<float>{kNaN, kInf, -kInf}, std::vector<float>{kNaN, kInf, -kInf});  // agrees: no failure
}

TEST_CASE("bitwise_equal and moments") {
  const Tensor a = Tensor::from({2, 2}, std::vector<float>{1.f, kNaN, 3.f, 4.f});
  CHECK(dpx::testing::bitwise_equal(a, a.clone()));  // NaN's bits equal themselves
  CHECK_FALSE(dpx::testing::bitwise_equal(a, a.view({4})));  // same bytes, another shape
  CHECK_FALSE(dpx::testing::bitwise_equal(a, a.cast(dpx::DType::f64)));
  const auto m = dpx::testing::moments(Tensor::from({4}, std::vector<float>{1.f, 2.f, 3.f, 4.f}));
  CHECK(m.mean == 2.5);
  CHECK(m.var == 1.25);
  CHECK(m.min == 1);
  CHECK(m.max == 4);
  for (float v : dpx::testing::poisoned({3}).to_vector()) CHECK(std::isnan(v));
}
