// The host backends' channels-last detour: the CPU and reference kernels of the convolution and
// pooling ops are written for (N, C, H, W) maps, and run channels-last ones (N, H, W, C) between
// two permutes made here (kernels/ops.def says which ops take a MemoryFormat). It keeps every
// channels-last result equal to the contiguous one bit for bit, which is what the CPU needs of
// them: a way to train and test a channels-last model (--memory-format) without a GPU. Fast
// channels-last kernels are the GPU's (kernels/cuda/conv2d.cu, kernels/cuda/pool.cu).
#pragma once
#include "kernels/ops.hpp"

namespace dpx::kernels {

// A new host tensor (N, C, H, W) holding nhwc (N, H, W, C) permuted; any 4-byte dtype (f32, i32).
// `threads`: the rank's (Context::threads); the result does not depend on them.
Tensor nchw_copy(const Tensor& nhwc, int threads);
// A new uninitialised host tensor (N, C, H, W) of nhwc's (N, H, W, C) sizes and dtype.
Tensor nchw_like(const Tensor& nhwc);
// nhwc (N, H, W, C) = nchw (N, C, H, W) permuted (4-byte elements, as nchw_copy).
void nhwc_from(Tensor& nhwc, const Tensor& nchw, int threads);

// The detour itself: a channels-last call of an op run through `contiguous`, the backend's own
// kernel of that op, on permuted copies. Gradients the op adds into are copied in and out, so the
// result is the contiguous kernel's bit for bit, its order of additions included.
using ConvForward = void (*)(Context&, Tensor&, const Tensor&, const Tensor&, const Tensor*, const ops::Conv2dParams&);
using ConvBackward = void (*)(Context&, Tensor*, Tensor*, Tensor*, const Tensor&, const Tensor&, const Tensor&,
                              const ops::Conv2dParams&, ops::DxMode);
using MaxPoolForward = void (*)(Context&, Tensor&, Tensor&, const Tensor&, const ops::Pool2dParams&);
using MaxPoolBackward = void (*)(Context&, Tensor&, const Tensor&, const Tensor&, const ops::Pool2dParams&,
                                 ops::DxMode);
using AvgPoolForward = void (*)(Context&, Tensor&, const Tensor&, const ops::Pool2dParams&);
using AvgPoolBackward = void (*)(Context&, Tensor&, const Tensor&, const ops::Pool2dParams&, ops::DxMode);
using AdaptiveForward = void (*)(Context&, Tensor&, const Tensor&, ops::MemoryFormat);
using AdaptiveBackward = void (*)(Context&, Tensor&, const Tensor&, ops::MemoryFormat, ops::DxMode);

void conv2d_forward_via_nchw(ConvForward contiguous, Context& ctx, Tensor& y, const Tensor& x, const Tensor& w,
                             const Tensor* b, const ops::Conv2dParams& p);
void conv2d_backward_via_nchw(ConvBackward contiguous, Context& ctx, Tensor* dx, Tensor* dw, Tensor* db,
                              const Tensor& dy, const Tensor& x, const Tensor& w, const ops::Conv2dParams& p,
                              ops::DxMode dx_mode);
void max_pool2d_forward_via_nchw(MaxPoolForward contiguous, Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x,
                                 const ops::Pool2dParams& p);
void max_pool2d_backward_via_nchw(MaxPoolBackward contiguous, Context& ctx, Tensor& dx, const Tensor& dy,
                                  const Tensor& argmax, const ops::Pool2dParams& p, ops::DxMode dx_mode);
void avg_pool2d_forward_via_nchw(AvgPoolForward contiguous, Context& ctx, Tensor& y, const Tensor& x,
                                 const ops::Pool2dParams& p);
void avg_pool2d_backward_via_nchw(AvgPoolBackward contiguous, Context& ctx, Tensor& dx, const Tensor& dy,
                                  const ops::Pool2dParams& p, ops::DxMode dx_mode);
void adaptive_avg_pool2d_forward_via_nchw(AdaptiveForward contiguous, Context& ctx, Tensor& y, const Tensor& x);
void adaptive_avg_pool2d_backward_via_nchw(AdaptiveBackward contiguous, Context& ctx, Tensor& dx, const Tensor& dy,
                                           ops::DxMode dx_mode);

}  // namespace dpx::kernels
