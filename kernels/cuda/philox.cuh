// The Philox generator of core/rng.cpp for CUDA kernels (core/philox.hpp is the one copy of
// its rounds), so a dropout mask drawn on the GPU equals the CPU's. Plain C++ too (host tests).
#pragma once
#include <cstdint>

#include "core/philox.hpp"

namespace dpx::cuda {

// The first 32-bit word of philox4x32(key, counter_hi, counter_lo): what Rng::bits_at uses.
DPX_HOST_DEVICE inline uint32_t philox_bits(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  return philox::philox4x32(key, counter_hi, counter_lo).word[0];
}

// Rng(seed, stream).uniform_at(counter).
DPX_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
  return philox::uniform_from_bits(philox_bits(seed, stream, counter));
}

}  // namespace dpx::cuda
