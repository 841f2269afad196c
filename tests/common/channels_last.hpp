// The tests' own permute between the two memory formats (host, 4-byte elements), written apart
// from the engine's (kernels/channels_last_host.cpp, the permute op), so that a channels-last
// result can be checked against the contiguous one permuted by code it does not share.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/tensor.hpp"

namespace dpx::testing {

// (N, C, H, W) -> a new (N, H, W, C) host tensor; `t` may live on a device.
inline Tensor to_channels_last(const Tensor& t) {
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  const int64_t N = h.size(0), C = h.size(1), H = h.size(2), W = h.size(3);
  Tensor out = Tensor::empty({N, H, W, C}, h.dtype());
  const auto* in = static_cast<const uint32_t*>(h.raw());
  auto* o = static_cast<uint32_t*>(out.raw());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x) o[((n * H + y) * W + x) * C + c] = in[((n * C + c) * H + y) * W + x];
  return out;
}

}  // namespace dpx::testing
