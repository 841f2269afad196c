// The vector versions of expf and erff in glibc's libmvec (libm.so pulls it in as needed; at most
// 4 ulp from the exact value, 16 lanes at a time on AVX-512): an `omp simd` loop that calls them
// calls the vector versions. <math.h> declares them so only under -ffast-math, which dpx does not
// use. Included by the kernels that vectorise exp or erf (smooth_activation.cpp, softmax.cpp,
// batch_norm.cpp), with the SiLU's formulas and the way two of them run it.
#pragma once
#include <cmath>

extern "C" {
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
}

namespace dpx::cpu::detail {

// x * sigmoid(x), written x / (1 + e^-x) as torch computes it (no 0 * inf for very negative x).
inline float silu_of(float v) { return v / (1.f + expf(-v)); }

// silu'(v) = s (1 + v (1 - s)) with s = sigmoid(v).
inline float silu_grad(float v) {
  const float s = 1.f / (1.f + expf(-v));
  return s * (1.f + v * (1.f - s));
}

// The SiLU's values go through `omp simd` loops of exactly kExpLanes iterations (simdlen: the
// same vector exp for every one of them), a span's last few padded to a whole one: a value's SiLU
// then depends on the value alone, not on where it lies (a plane's tail, a channels-last row, an
// eval batch norm's single-value planes) or on which op computes it. silu_forward and
// silu_backward, and batch norm's SiLU epilogue and folded backward (ops::Epilogue::silu), run
// through by_lanes; the bits then agree across layouts and between the folded and unfolded ops.
inline constexpr int64_t kExpLanes = 16;

struct Silu {
  float operator()(float v) const { return silu_of(v); }
};
struct SiluGrad {
  float operator()(float v) const { return silu_grad(v); }
};

// put(i, f(arg(i))) for i < n (f: Silu or SiluGrad), kExpLanes at a time; a last partial chunk
// is computed padded with zeros, whose results are dropped. The simd loops hold only arg, f and a
// store to r: with put inside (a select, an accumulation) the compiler has split a loop and left
// a copy of it scalar, whose expf is not the vector one.
template <class Arg, class F, class Put>
inline void by_lanes(int64_t n, Arg arg, F f, Put put) {
  alignas(64) float r[kExpLanes];
  int64_t i = 0;
  for (; i + kExpLanes <= n; i += kExpLanes) {
#pragma omp simd simdlen(16)
    for (int64_t j = 0; j < kExpLanes; ++j) r[j] = f(arg(i + j));
    for (int64_t j = 0; j < kExpLanes; ++j) put(i + j, r[j]);
  }
  if (i == n) return;
  alignas(64) float v[kExpLanes] = {};
  for (int64_t j = 0; i + j < n; ++j) v[j] = arg(i + j);
#pragma omp simd simdlen(16)
  for (int64_t j = 0; j < kExpLanes; ++j) r[j] = f(v[j]);
  for (int64_t j = 0; i + j < n; ++j) put(i + j, r[j]);
}
static_assert(kExpLanes == 16, "the loops' simdlen");

}  // namespace dpx::cpu::detail
