// The CUDA convolution's path choice (kernels/conv_paths.hpp): dpx's depthwise kernels for fp32
// depthwise convolutions (any channel multiplier), cuDNN for the rest and for half precision.
#include <doctest/doctest.h>

#include "kernels/conv_paths.hpp"

using dpx::kernels::depthwise_by_dpx;

TEST_CASE("depthwise convolutions in fp32 take dpx's kernels; grouped, dense and half ones cuDNN") {
  CHECK(depthwise_by_dpx(32, 32, 32, false));        // EfficientNet's depthwise 3x3 and 5x5
  CHECK(depthwise_by_dpx(24, 48, 24, false));        // a channel multiplier of 2
  CHECK_FALSE(depthwise_by_dpx(32, 32, 32, true));   // bf16/fp16: cuDNN's tensor-core kernels
  CHECK_FALSE(depthwise_by_dpx(32, 64, 8, false));   // grouped, not depthwise (ResNeXt-style)
  CHECK_FALSE(depthwise_by_dpx(32, 64, 1, false));   // a dense convolution
  CHECK_FALSE(depthwise_by_dpx(1, 1, 1, false));     // one channel, one group: dense
}
