// Helpers for the kernel tests: seeded random tensors, element-wise comparison with a tolerance
// relative to max(|a|, |b|, 1), and bitwise equality for the thread-count invariance checks.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "tests/common/compare.hpp"

namespace dpx::test {

inline Tensor randn(const Shape& shape, uint64_t seed, float stddev = 1.f) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed);
  fill_normal(t, rng, 0.f, stddev);
  return t;
}

// Largest |a_i - b_i| / max(|a_i|, |b_i|, 1); a NaN or an infinity against a number is +infinity.
inline double max_rel_diff(const std::vector<float>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  return dpx::testing::max_rel_diff(a, b);
}

inline void check_close(const Tensor& got, const std::vector<double>& want, double tol = 1e-5) {
  CHECK(max_rel_diff(got.to_vector(), want) <= tol);
}

inline void check_close(const Tensor& got, const Tensor& want, double tol = 1e-5) {
  auto w = want.to_vector();
  check_close(got, std::vector<double>(w.begin(), w.end()), tol);
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

inline Tensor labels_from(const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::i64);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

}  // namespace dpx::test
