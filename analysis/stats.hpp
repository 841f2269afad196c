// Statistics of repeated measurements (dpx bench --repeat N): the median, a distribution-free
// confidence interval of the median from order statistics, the spread, and the noisy flag.
// Plain numbers only: no tensors, no files.
#pragma once
#include <vector>

namespace dpx::analysis {

// The median of `xs` (the mean of the two middle values for an even count); NaN when empty.
double median(std::vector<double> xs);

// A confidence interval of the median, distribution-free, from order statistics: the interval
// [x_(l), x_(n+1-l)] of the sorted sample with the largest l for which
//   coverage = P(l <= B < n+1-l) = 1 - 2 P(B <= l-1),  B ~ Binomial(n, 1/2),
// is at least `level` (the true median lies below x_(l) only if fewer than l samples do). Below
// six samples no pair reaches 95 %: the interval is then [min, max], and `coverage` says what it
// holds (n = 3: 75 %, 4: 87.5 %, 5: 93.75 %). Fewer than 3 samples: no interval (valid = false).
struct MedianCi {
  bool valid = false;
  double lo = 0, hi = 0;
  double coverage = 0;  // the interval's exact confidence level, in [0, 1]
};
MedianCi median_ci(std::vector<double> xs, double level = 0.95);

// (max - min) / median; 0 for fewer than two samples or a zero median.
double spread(const std::vector<double>& xs);

// A measurement is noisy when its spread exceeds `threshold` (dpx bench --noisy-spread).
bool is_noisy(const std::vector<double>& xs, double threshold);

// Everything dpx bench writes for one quantity measured N times.
struct RepeatStats {
  double median = 0;
  MedianCi ci;
  double spread = 0;
};
RepeatStats repeat_stats(const std::vector<double>& xs, double level = 0.95);

}  // namespace dpx::analysis
