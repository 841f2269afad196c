// Comparisons for every test suite, NaN- and Inf-aware. std::max(worst, NaN) keeps `worst`, so a
// hand-written "largest difference" loop lets a kernel that returns NaN pass; these do not: a
// non-finite value where the other side has a different value (a number, the other infinity)
// differs by +infinity, and fails every tolerance. Equal non-finite values (NaN and NaN, +inf and
// +inf) differ by 0: the reference said the same.
//
// Every function takes two equally long sequences of numbers (std::vector<float>,
// std::vector<double>, ...) or Tensors (f32 on any device: their values are copied to the host).
// Sequences of different lengths differ by +infinity.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <source_location>
#include <sstream>
#include <vector>

#include "core/tensor.hpp"

namespace dpx::testing {

namespace detail {
constexpr double kInf = std::numeric_limits<double>::infinity();

// 0 or +infinity when a or b is not finite; -1 when both are finite.
inline double nonfinite_diff(double a, double b) {
  if (std::isfinite(a) && std::isfinite(b)) return -1;
  if ((std::isnan(a) && std::isnan(b)) || a == b) return 0;
  return kInf;
}

// A Tensor's values on the host; any other sequence as it is.
inline std::vector<float> values(const Tensor& t) { return t.to_vector(); }
template <class S>
const S& values(const S& s) {
  return s;
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

// The largest difference between got and want, and where it is.
struct Worst {
  double diff = 0;   // +infinity when the lengths differ
  size_t index = 0;  // of the first largest difference (the shorter length when they differ)
  double got = 0, want = 0;
  size_t got_size = 0, want_size = 0;
};

// The largest rel_diff(got[i], want[i], floor) (relative = false: abs_diff), with its index.
template <class A, class B>
Worst worst_diff(const A& got_seq, const B& want_seq, bool relative = true, double floor = 1.0) {
  const auto& got = detail::values(got_seq);
  const auto& want = detail::values(want_seq);
  Worst w;
  w.got_size = got.size();
  w.want_size = want.size();
  if (got.size() != want.size()) {
    w.diff = detail::kInf;
    w.index = std::min(got.size(), want.size());
    return w;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), x = static_cast<double>(want[i]);
    const double d = relative ? rel_diff(g, x, floor) : abs_diff(g, x);
    if (!(d <= w.diff)) w = Worst{d, i, g, x, got.size(), want.size()};  // a NaN is never skipped
  }
  return w;
}

// The largest rel_diff over two sequences.
template <class A, class B>
double max_rel_diff(const A& a, const B& b, double floor = 1.0) {
  return worst_diff(a, b, true, floor).diff;
}

// The largest abs_diff, likewise.
template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  return worst_diff(a, b, false).diff;
}

// ||got - want|| / ||want|| (||got - want|| when want is all zeros). For GEMM- and reduction-based
// ops: a single output that nearly cancels can differ far more than 1e-5 relative to itself
// while the result as a whole agrees to rounding. +infinity when any element is NaN or an
// infinity where the other side differs (the sum of squares would be NaN, or inf / inf);
// elements equal and non-finite on both sides count as agreeing.
template <class A, class B>
double norm_rel_diff(const A& got_seq, const B& want_seq) {
  const auto& got = detail::values(got_seq);
  const auto& want = detail::values(want_seq);
  if (got.size() != want.size()) return detail::kInf;
  double diff = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const double nf = detail::nonfinite_diff(g, w);
    if (nf > 0) return detail::kInf;
    if (nf == 0) continue;
    diff += (g - w) * (g - w);
    ref += w * w;
  }
  const double r = ref == 0 ? std::sqrt(diff) : std::sqrt(diff / ref);
  return std::isnan(r) ? detail::kInf : r;  // inf / inf when both sums overflow
}

// max |got - want| / max(max |want|, floor): the error relative to the reference's own scale,
// which stays meaningful for entries near zero (gradients, logits of a random model). The scale
// is taken over the reference's finite entries only: an infinity there (matched by `got`) would
// otherwise hide every other error as x / inf = 0.
template <class A, class B>
double scaled_error(const A& got_seq, const B& want_seq, double floor = 0) {
  const auto& got = detail::values(got_seq);
  const auto& want = detail::values(want_seq);
  if (got.size() != want.size()) return detail::kInf;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = static_cast<double>(want[i]);
    const double d = abs_diff(static_cast<double>(got[i]), w);
    if (!(d <= diff)) diff = d;
    if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
  }
  if (std::isinf(diff)) return diff;
  scale = std::max(scale, floor);
  return scale > 0 ? diff / scale : diff;
}

// Whether every rel_diff(got[i], want[i], floor) <= tol, and if not, a message naming the worst
// element ("largest relative difference 0.5 > 1e-05 at [3]: got 1, want 2").
struct Closeness {
  bool ok = true;
  Worst worst;
  std::string message;
};

template <class A, class B>
Closeness closeness(const A& got, const B& want, double tol = 1e-5, double floor = 1.0) {
  Closeness c;
  c.worst = worst_diff(got, want, true, floor);
  c.ok = c.worst.diff <= tol;  // false for NaN too
  if (!c.ok) {
    std::ostringstream os;
    if (c.worst.got_size != c.worst.want_size)
      os << "got " << c.worst.got_size << " values, want " << c.worst.want_size;
    else
      os << "largest relative difference " << c.worst.diff << " > " << tol << " at [" << c.worst.index
         << "] of " << c.worst.got_size << ": got " << c.worst.got << ", want " << c.worst.want;
    c.message = os.str();
  }
  return c;
}

// A doctest CHECK, reported at the caller's line, that got and want agree element-wise to tol
// relative to max(|got|, |want|, floor); on failure it names the worst element, got and want.
template <class A, class B>
void check_close(const A& got, const B& want, double tol = 1e-5, double floor = 1.0,
                 std::source_location where = std::source_location::current()) {
  const Closeness c = closeness(got, want, tol, floor);
  if (!c.ok) ADD_FAIL_CHECK_AT(where.file_name(), static_cast<int>(where.line()), c.message);
}
// For a braced list of wanted values: check_close(y, {1, 2.5, 3}).
inline void check_close(const Tensor& got, const std::vector<double>& want, double tol = 1e-5,
                        double floor = 1.0, std::source_location where = std::source_location::current()) {
  check_close<Tensor, std::vector<double>>(got, want, tol, floor, where);
}
template <class T>
void check_close(const std::vector<T>& got, const std::vector<double>& want, double tol = 1e-5,
                 double floor = 1.0, std::source_location where = std::source_location::current()) {
  check_close<std::vector<T>, std::vector<double>>(got, want, tol, floor, where);
}

}  // namespace dpx::testing
