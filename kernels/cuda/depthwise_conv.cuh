// dpx's depthwise convolution kernels (groups = input channels, K = C x multiplier output
// channels, w (K, 1, kH, kW)), fp32, for kernels/cuda/conv2d.cu when kernels::depthwise_by_dpx
// says so. Every sum runs in a fixed order: the results repeat bit for bit, with or without
// --deterministic.
#pragma once
#include <cstdint>

#include "core/cuda/context.hpp"
#include "kernels/cuda/fast_divide.hpp"

namespace dpx::cuda::detail {

struct DepthwiseShape {
  int64_t n, c, h, w, k, oh, ow;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int multiplier;  // k / c
  // Divisions by a multiply-high (fast_divide.hpp) where the kernels index in 32 bits: a row's
  // length to place a position (by_w, by_ow), and the strides, which the input gradient's gather
  // divides by at every tap (by_sh, by_sw). Set by with_dividers().
  FastDivide by_w, by_ow, by_sh, by_sw;
};

// s with its dividers set: a size of 0 (an empty tensor's: no kernel runs) or above 2^31 (the
// kernels then index in 64 bits, by the hardware's division) divides by 1, unused.
inline DepthwiseShape with_dividers(DepthwiseShape s) {
  const auto of = [](int64_t v) {
    return FastDivide(static_cast<uint32_t>(v < 1 || v > (int64_t(1) << 31) ? 1 : v));
  };
  s.by_w = of(s.w);
  s.by_ow = of(s.ow);
  s.by_sh = of(s.sh);
  s.by_sw = of(s.sw);
  return s;
}

// y (N, K, OH, OW) = the convolution, plus b[k] when b is given (written, not added to).
void depthwise_forward(const CudaState& st, float* y, const float* x, const float* w, const float* b,
                       const DepthwiseShape& s);
// dx (N, C, H, W) = (accumulate ? dx + : ) the gradient through the convolution.
void depthwise_backward_data(const CudaState& st, float* dx, const float* dy, const float* w, const DepthwiseShape& s,
                             bool accumulate);
// dw (K, 1, kH, kW) += the weight gradient.
void depthwise_backward_filter(const CudaState& st, float* dw, const float* dy, const float* x,
                               const DepthwiseShape& s);

}  // namespace dpx::cuda::detail
