// Comparisons for every test suite, NaN- and Inf-aware. std::max(worst, NaN) keeps `worst`, so a
// hand-written "largest difference" loop lets a kernel that returns NaN pass; these do not: a
// non-finite value where the other side has a different value (a number, the other infinity)
// differs by +infinity, and fails every tolerance. Equal non-finite values (NaN and NaN, +inf and
// +inf) differ by 0: the reference said the same.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace dpx::testing {

namespace detail {
// 0 or +infinity when a or b is not finite; -1 when both are finite.
inline double nonfinite_diff(double a, double b) {
  if (std::isfinite(a) && std::isfinite(b)) return -1;
  if ((std::isnan(a) && std::isnan(b)) || a == b) return 0;
  return std::numeric_limits<double>::infinity();
}
}  // namespace detail

// |a - b|.
inline double abs_diff(double a, double b) {
  const double nf = detail::nonfinite_diff(a, b);
  return nf >= 0 ? nf : std::fabs(a - b);
}

// |a - b| / max(|a|, |b|, floor).
inline double rel_diff(double a, double b, double floor = 1.0) {
  const double nf = detail::nonfinite_diff(a, b);
  return nf >= 0 ? nf : std::fabs(a - b) / std::max({std::fabs(a), std::fabs(b), floor});
}

// The largest rel_diff over two equally long sequences (of float or double); +infinity when the
// lengths differ.
template <class A, class B>
double max_rel_diff(const A& a, const B& b, double floor = 1.0) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = rel_diff(static_cast<double>(a[i]), static_cast<double>(b[i]), floor);
    if (!(d <= worst)) worst = d;  // written so that a NaN could never be skipped
  }
  return worst;
}

// The largest abs_diff, likewise.
template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = abs_diff(static_cast<double>(a[i]), static_cast<double>(b[i]));
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

}  // namespace dpx::testing
