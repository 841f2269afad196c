// Philox-4x32-10 (Salmon et al., SC'11; the constants of Random123), for host C++ and CUDA alike:
// core/rng.cpp and the CUDA kernels (kernels/cuda/philox.cuh) both draw from this one function,
// so a dropout mask drawn on the GPU equals the CPU's bit for bit.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define DPX_HOST_DEVICE __host__ __device__
#else
#define DPX_HOST_DEVICE
#endif

namespace dpx::philox {

constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // the key schedule's increments
constexpr int kRounds = 10;

struct Block {
  uint32_t word[4];
};

// The four 32-bit words for (key, counter): the counter is (counter_hi, counter_lo), low word first.
DPX_HOST_DEVICE inline Block philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMultiplier0) * c0, p1 = static_cast<uint64_t>(kMultiplier1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return Block{{c0, c1, c2, c3}};
}

// 24 random bits of a word scaled to [0, 1), exact in float.
DPX_HOST_DEVICE inline float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

}  // namespace dpx::philox
