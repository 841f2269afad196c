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

// The SiLU's values go through one `omp simd` loop of exactly kExpLanes iterations, the last few
// of a span padded to a whole one: every value meets the same vector exp, so its SiLU depends on
// the value alone, not on where it lies (a plane's tail, a channels-last row, an eval batch
// norm's single-value planes) or on which op computes it. silu_forward and silu_backward, and
// batch norm's SiLU epilogue and folded backward (ops::Epilogue::silu), use these; the bits then
// agree across layouts and between the folded and the unfolded ops.
inline constexpr int64_t kExpLanes = 16;

inline void silu_lanes(float* out, const float* v) {
#pragma omp simd
  for (int64_t j = 0; j < kExpLanes; ++j) out[j] = silu_of(v[j]);
}
inline void silu_grad_lanes(float* out, const float* v) {
#pragma omp simd
  for (int64_t j = 0; j < kExpLanes; ++j) out[j] = silu_grad(v[j]);
}

// For i < n, kExpLanes at a time: v[i] = arg(i), then put(i, r[i]) with r = lanes(v) (silu_lanes
// or silu_grad_lanes); a last partial chunk is padded with zeros, whose results are dropped.
template <class Arg, class Lanes, class Put>
inline void by_lanes(int64_t n, Arg arg, Lanes lanes, Put put) {
  for (int64_t i = 0; i < n; i += kExpLanes) {
    const int64_t m = n - i < kExpLanes ? n - i : kExpLanes;
    alignas(64) float v[kExpLanes] = {}, r[kExpLanes];
    for (int64_t j = 0; j < m; ++j) v[j] = arg(i + j);
    lanes(r, v);
    for (int64_t j = 0; j < m; ++j) put(i + j, r[j]);
  }
}

}  // namespace dpx::cpu::detail
