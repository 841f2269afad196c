// dpx's depthwise convolution kernels (groups = input channels, K = C x multiplier output
// channels, w (K, 1, kH, kW)), fp32, for kernels/cuda/conv2d.cu when kernels::depthwise_by_dpx
// says so. Every sum runs in a fixed order: the results repeat bit for bit, with or without
// --deterministic.
#pragma once
#include <cstdint>

#include "core/cuda/context.hpp"

namespace dpx::cuda::detail {

struct DepthwiseShape {
  int64_t n, c, h, w, k, oh, ow;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int multiplier;  // k / c
};

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
