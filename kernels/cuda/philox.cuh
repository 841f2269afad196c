// Philox-4x32-10 for host and device, bit for bit the generator of core/rng.cpp, so a dropout
// mask drawn on the GPU equals the CPU's. Compiles as plain C++ too (for host-side tests).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define DPX_HOST_DEVICE __host__ __device__
#else
#define DPX_HOST_DEVICE
#endif

namespace dpx::cuda {

// The first 32-bit word of philox4x32(key, counter_hi, counter_lo): what Rng::bits_at uses.
DPX_HOST_DEVICE inline uint32_t philox_bits(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = static_cast<uint32_t>(p1);
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}

// Rng(seed, stream).uniform_at(counter): 24 random bits scaled to [0, 1), exact in float.
DPX_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
  return static_cast<float>(philox_bits(seed, stream, counter) >> 8) * (1.0f / 16777216.0f);
}

}  // namespace dpx::cuda
