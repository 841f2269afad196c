// The direct depthwise convolution (one input channel per group) that conv2d.cpp runs instead
// of im2col + GEMM, which for groups == C_in becomes N * C_in tiny products; and the index
// helper both files use to clip a strided window walk to the image.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/context.hpp"

namespace dpx::cpu::detail {

// Output channel k = c * M + m reads input channel c: x (N, C, H, W), w (C * M, 1, kh, kw),
// y (N, C * M, OH, OW). Already checked by conv2d.cpp.
struct DepthwiseShape {
  int64_t N, C, M, H, W, kh, kw, OH, OW;
  int sh, sw, ph, pw, dh, dw;  // stride, padding, dilation
};

// y = depthwise convolution of x with w, plus b (C * M floats) when b is not null.
void depthwise_conv2d_forward(const Context& ctx, float* y, const float* x, const float* w,
                              const float* b, const DepthwiseShape& s);

// dx += dL/dx and dw += dL/dw for dy (N, C * M, OH, OW); either output may be null.
void depthwise_conv2d_backward(const Context& ctx, float* dx, float* dw, const float* dy,
                               const float* x, const float* w, const DepthwiseShape& s);

// Positions o in [0, O) whose index o * stride + off lies in [0, L): [lo, hi).
inline void valid_range(int64_t L, int64_t O, int stride, int64_t off, int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  hi = L - 1 - off < 0 ? 0 : std::min(O, (L - 1 - off) / stride + 1);
  lo = std::min(lo, hi);
}

}  // namespace dpx::cpu::detail
