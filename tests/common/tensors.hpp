// Test inputs for every suite: seeded random tensors and labels, inputs shaped for a purpose
// (away from ReLU's kink, without near-ties for max-pooling), outputs poisoned with NaN,
// bitwise equality, and the moments of a tensor's values. All on the host unless a device is
// given; the same seed gives the same values on every machine and thread count (core/rng).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "core/device.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace dpx::testing {

// N(mean, stddev) (Philox stream 0 of `seed`).
inline Tensor randn(const Shape& shape, uint64_t seed, float stddev = 1.f, float mean = 0.f) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed);
  fill_normal(t, rng, mean, stddev);
  return t;
}

// U(lo, hi) (Philox stream 0 of `seed`: the layers suite's gradient checks were measured on
// these inputs).
inline Tensor uniform(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed);
  fill_uniform(t, rng, lo, hi);
  return t;
}

// x with each element moved by up to `relative` of itself (U(-1, 1) noise from `seed`): a
// rounding-sized change of an input, to see how much a result depends on its rounding.
inline Tensor moved_by(const Tensor& x, double relative, uint64_t seed) {
  Tensor t = x.clone(), noise = uniform(x.shape(), seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= 1.f + float(relative) * noise.data<float>()[i];
  return t;
}

// An i64 label tensor holding `values`.
inline Tensor labels_from(const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::i64);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

// n labels drawn uniformly from [0, classes) (stream 5 of `seed`).
inline Tensor random_labels(int64_t n, int64_t classes, uint64_t seed) {
  Tensor t = Tensor::empty({n}, DType::i64);
  Rng rng(seed, 5);
  for (int64_t i = 0; i < n; ++i)
    t.data<int64_t>()[i] = static_cast<int64_t>(rng.bits_at(static_cast<uint64_t>(i)) % static_cast<uint64_t>(classes));
  return t;
}

// Values in [margin, 1] with random signs: no element within `margin` of ReLU's kink.
inline Tensor away_from_zero(const Shape& shape, uint64_t seed, float margin = 0.1f) {
  Tensor t = uniform(shape, seed, margin, 1.f);
  Rng signs(seed + 1);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (signs.uniform() < 0.5f) t.data<float>()[i] = -t.data<float>()[i];
  return t;
}

// A random arrangement of 0, gap, 2 gap, ...: every pair of values differs by >= gap, so a
// max-pool window has no near-tie when gap > 2 eps.
inline Tensor distinct_values(const Shape& shape, uint64_t seed, float gap = 0.1f) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed);
  auto perm = permutation(t.numel(), rng);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = gap * static_cast<float>(perm[i]);
  return t;
}

// An f32 tensor of `shape` on `device` filled with NaN: outputs start poisoned, so an element a
// kernel forgets to write shows up in every comparison.
inline Tensor poisoned(const Shape& shape, Device device = Device::cpu()) {
  Tensor h = Tensor::empty(shape);
  std::fill(h.data<float>(), h.data<float>() + h.numel(), std::numeric_limits<float>::quiet_NaN());
  return device.is_cpu() ? h : h.to(device);
}

// Same shape, dtype and bytes (copied to the host first when on a device).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ha = a.device().is_cpu() ? a : a.to(Device::cpu());
  const Tensor hb = b.device().is_cpu() ? b : b.to(Device::cpu());
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

// Mean and (population) variance, two-pass, and the extremes of a set of values.
struct Moments {
  double mean = 0, var = 0;
  double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity();
  double stddev() const { return std::sqrt(var); }
};
inline Moments moments(std::span<const float> v) {
  Moments m;
  if (v.empty()) return m;
  for (float f : v) {
    m.mean += f;
    m.min = std::min(m.min, static_cast<double>(f));
    m.max = std::max(m.max, static_cast<double>(f));
  }
  m.mean /= static_cast<double>(v.size());
  for (float f : v) m.var += (f - m.mean) * (f - m.mean);
  m.var /= static_cast<double>(v.size());
  return m;
}
inline Moments moments(const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  return moments(std::span<const float>(v));
}

}  // namespace dpx::testing
