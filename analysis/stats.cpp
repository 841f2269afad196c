// The median, its order-statistic confidence interval, spread and noisy flag (analysis/stats.hpp).
#include "analysis/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dpx::analysis {

double median(std::vector<double> xs) {
  if (xs.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

namespace {
// P(B <= k) for B ~ Binomial(n, 1/2), summed exactly enough in doubles for n up to ~1000.
double binomial_half_cdf(int n, int k) {
  if (k < 0) return 0;
  double term = std::pow(0.5, n), sum = 0;  // C(n, 0) / 2^n
  for (int i = 0; i <= k && i <= n; ++i) {
    sum += term;
    term = term * (n - i) / (i + 1);
  }
  return sum;
}
}  // namespace

MedianCi median_ci(std::vector<double> xs, double level) {
  MedianCi ci;
  const int n = static_cast<int>(xs.size());
  if (n < 3) return ci;
  std::sort(xs.begin(), xs.end());
  int l = 1;  // 1-based rank of the lower end; the upper end is n + 1 - l
  while (l + 1 <= n + 1 - (l + 1) && 1 - 2 * binomial_half_cdf(n, l) >= level) ++l;
  ci.valid = true;
  ci.lo = xs[static_cast<size_t>(l - 1)];
  ci.hi = xs[static_cast<size_t>(n - l)];
  ci.coverage = 1 - 2 * binomial_half_cdf(n, l - 1);
  return ci;
}

double spread(const std::vector<double>& xs) {
  if (xs.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(xs.begin(), xs.end());
  const double m = median(xs);
  return m != 0 ? (*hi - *lo) / std::abs(m) : 0;
}

bool is_noisy(const std::vector<double>& xs, double threshold) { return spread(xs) > threshold; }

RepeatStats repeat_stats(const std::vector<double>& xs, double level) {
  return {median(xs), median_ci(xs, level), spread(xs)};
}

}  // namespace dpx::analysis
