// Which CUDA path a 2-D convolution takes, as a plain function of its shape and math (tested on
// the CPU: tests/kernels/test_conv_paths.cpp). Depthwise convolutions in fp32 run dpx's own
// kernels (kernels/cuda/depthwise_conv.cu), as PyTorch's _conv_depthwise2d: cuDNN's took 63 ms of
// EfficientNet-B0's backward where PyTorch's took 19 ms (H100, batch 64, 2026-11-26). Everything
// else, and depthwise ones in bf16/fp16, goes to cuDNN.
#pragma once
#include <cstdint>

namespace dpx::kernels {

// c: input channels; k: output channels; groups as Conv2dParams; half: bf16/fp16 compute.
inline bool depthwise_by_dpx(int64_t c, int64_t k, int groups, bool half) {
  return !half && groups > 1 && groups == c && k % c == 0;
}

}  // namespace dpx::kernels
