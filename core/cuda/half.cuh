// f16 and bf16 on the device, rounded exactly as dpx's host conversions round (core/dtype.cpp:
// to nearest, ties to even; a NaN stays a quiet NaN), so a GPU kernel that narrows or widens gives
// the CPU's bits. For CUDA sources only (kernels/cuda/, parallel/cuda/).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace dpx::cuda {

struct F16 {
  __device__ static float load(uint16_t h) { return __half2float(__ushort_as_half(h)); }
  __device__ static uint16_t store(float f) { return __half_as_ushort(__float2half_rn(f)); }
};

struct BF16 {
  __device__ static float load(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
  __device__ static uint16_t store(float f) {
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu)) return static_cast<uint16_t>((x >> 16) | 0x40);
    x += 0x7FFFu + ((x >> 16) & 1);
    return static_cast<uint16_t>(x >> 16);
  }
};

// Four consecutive half-precision values as one 8-byte word (the first in the low bits, as they
// lie in memory), for kernels that move 4 values a thread.
template <typename H>
__device__ inline float4 load4(uint2 h) {
  return make_float4(H::load(static_cast<uint16_t>(h.x)), H::load(static_cast<uint16_t>(h.x >> 16)),
                     H::load(static_cast<uint16_t>(h.y)), H::load(static_cast<uint16_t>(h.y >> 16)));
}
template <typename H>
__device__ inline uint2 store4(float4 v) {
  return make_uint2(uint32_t(H::store(v.x)) | uint32_t(H::store(v.y)) << 16,
                    uint32_t(H::store(v.z)) | uint32_t(H::store(v.w)) << 16);
}

}  // namespace dpx::cuda
