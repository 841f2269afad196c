// dpx bench --repeat's statistics: the median, the order-statistic confidence interval of the
// median on samples whose answer is known by hand, the spread and the noisy flag.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "analysis/stats.hpp"

using namespace dpx::analysis;

TEST_CASE("the median is the middle value, or the mean of the two middle ones, of any order") {
  CHECK(median({3, 1, 2}) == 2);
  CHECK(median({5, 1, 4, 2}) == 3);
  CHECK(median({7}) == 7);
  CHECK(median({10, 10, 1, 1000, 10}) == 10);
  CHECK(std::isnan(median({})));
}

TEST_CASE("the confidence interval of the median is the widest pair of order statistics below six samples") {
  CHECK_FALSE(median_ci({1, 2}).valid);
  MedianCi three = median_ci({30, 10, 20});
  REQUIRE(three.valid);
  CHECK(three.lo == 10);
  CHECK(three.hi == 30);
  CHECK(three.coverage == doctest::Approx(0.75));  // 1 - 2 / 2^3
  CHECK(median_ci({4, 1, 3, 2, 5}).coverage == doctest::Approx(0.9375));
  MedianCi six = median_ci({6, 5, 4, 3, 2, 1});
  CHECK(six.lo == 1);
  CHECK(six.hi == 6);
  CHECK(six.coverage == doctest::Approx(0.96875));  // 1 - 2 / 2^6 >= 95 %
}

TEST_CASE("with ten samples the 95 % interval of the median is the 2nd to the 9th smallest") {
  // P(B <= 1) = 11 / 1024 for B ~ Binomial(10, 1/2): [x(2), x(9)] covers 1 - 22/1024 = 97.9 %;
  // [x(3), x(8)] would cover only 1 - 2 * 56/1024 = 89.1 %.
  MedianCi ci = median_ci({10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  REQUIRE(ci.valid);
  CHECK(ci.lo == 2);
  CHECK(ci.hi == 9);
  CHECK(ci.coverage == doctest::Approx(1 - 22.0 / 1024));
  // With 100 samples the textbook interval is [x(40), x(61)] (coverage 96.5 %).
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  MedianCi big = median_ci(hundred);
  CHECK(big.lo == 40);
  CHECK(big.hi == 61);
  CHECK(big.coverage >= 0.95);
}

TEST_CASE("the interval holds the median") {
  const std::vector<double> xs = {103, 98, 101, 250, 99, 100, 102, 97};
  RepeatStats s = repeat_stats(xs);
  REQUIRE(s.ci.valid);
  CHECK(s.ci.lo <= s.median);
  CHECK(s.median <= s.ci.hi);
  CHECK(s.median == 100.5);
}

TEST_CASE("the spread is (max - min) / median and flags a noisy measurement above the threshold") {
  CHECK(spread({90, 100, 110}) == doctest::Approx(0.2));
  CHECK(spread({100}) == 0);
  CHECK(spread({0, 0, 0}) == 0);
  CHECK(is_noisy({90, 100, 110}, 0.10));
  CHECK_FALSE(is_noisy({95, 100, 105}, 0.10));
  CHECK_FALSE(is_noisy({100}, 0.10));
}
