// The tests' own comparisons (tests/common/compare.hpp) must fail on a NaN or an infinity where
// the reference has a number: a comparison that skips them lets a broken kernel pass.
#include <doctest/doctest.h>

#include <limits>
#include <vector>

#include "tests/common/compare.hpp"

using dpx::testing::abs_diff;
using dpx::testing::max_abs_diff;
using dpx::testing::max_rel_diff;
using dpx::testing::rel_diff;

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
