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

}  // namespace dpx::cuda
