// The kernel tests' shorthand for window parameters: square kernels, strides, paddings and
// dilations, as most test cases need them.
#pragma once
#include <doctest/doctest.h>

#include "kernels/ops.hpp"

namespace dpx::testing {

inline ops::Conv2dParams conv_params(int stride, int pad, int dilation, int groups) {
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = stride;
  p.pad_h = p.pad_w = pad;
  p.dilation_h = p.dilation_w = dilation;
  p.groups = groups;
  return p;
}

inline ops::Pool2dParams pool_params(int kernel, int stride, int pad, bool ceil_mode = false,
                                     bool count_include_pad = true) {
  ops::Pool2dParams p;
  p.kernel_h = p.kernel_w = kernel;
  p.stride_h = p.stride_w = stride;
  p.pad_h = p.pad_w = pad;
  p.ceil_mode = ceil_mode;
  p.count_include_pad = count_include_pad;
  return p;
}

// Calls f(ctx, half, channels_last) for each half type (bf16, fp16), host backend (the CPU
// kernels on 2 threads, then the reference ones; ctx.compute the half type) and layout (NCHW, then
// channels-last): the half-precision maps' host cases, each CAPTUREd.
template <class F>
void for_each_half_host_case(F&& f) {
  for (DType half : {DType::bf16, DType::f16})
    for (bool reference : {false, true})
      for (bool channels_last : {false, true}) {
        CAPTURE(dtype_name(half));
        CAPTURE(reference);
        CAPTURE(channels_last);
        Context ctx = reference ? Context::ref() : Context::cpu(2);
        ctx.compute = half;
        f(ctx, half, channels_last);
      }
}

}  // namespace dpx::testing
