// The kernel tests' shorthand for window parameters: square kernels, strides, paddings and
// dilations, as most test cases need them.
#pragma once
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

}  // namespace dpx::testing
