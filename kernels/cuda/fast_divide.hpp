// n / d and n % d for 32-bit n below 2^31 by one multiply-high, an add and a shift (Granlund and
// Montgomery's method, as PyTorch's IntDivider), for the elementwise kernels' channel lookups: a
// hardware 32-bit division is about twenty instructions, two per element cost more than the
// element's memory traffic on an H100 or H200. Host and device code alike (the host form is
// tested on the CPU: tests/kernels/test_fast_divide.cpp). quotient() picks it or the hardware by
// index width; PlainDivide is FastDivide's interface by the hardware division, for 64-bit indices.
#pragma once
#include <cstdint>

#include "core/error.hpp"
#include "core/philox.hpp"  // DPX_HOST_DEVICE

namespace dpx::cuda {

struct FastDivide {
  uint32_t divisor = 1, magic = 1, shift = 0;

  FastDivide() = default;
  // 1 <= d <= 2^31: shift is the least with 2^shift >= d (so at most 31), magic = 2^32 (2^shift -
  // d) / d + 1 (< 2^32).
  explicit FastDivide(uint32_t d) : divisor(d) {
    DPX_CHECK(d >= 1 && d <= (uint32_t(1) << 31), "FastDivide: divisor ", d, " is outside [1, 2^31]");
    while (shift < 32 && (uint64_t(1) << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  // Exact for n < 2^31 (then t + n cannot overflow).
  DPX_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, magic);
#else
    const uint32_t t = static_cast<uint32_t>((uint64_t(n) * magic) >> 32);
#endif
    return (t + n) >> shift;
  }
  DPX_HOST_DEVICE uint32_t mod(uint32_t n) const { return n - div(n) * divisor; }
};

// n / d for a kernel's index type I: by d's FastDivide f where I is 32 bits wide (n < 2^31 there),
// by the hardware where it is 64 (f unused).
template <typename I>
DPX_HOST_DEVICE inline I quotient(I n, I d, const FastDivide& f) {
  if constexpr (sizeof(I) == 4) return I(f.div(static_cast<uint32_t>(n)));
  else return n / d;
}

struct PlainDivide {
  uint64_t divisor = 1;

  PlainDivide() = default;
  explicit PlainDivide(uint64_t d) : divisor(d) {}
  DPX_HOST_DEVICE uint64_t div(uint64_t n) const { return n / divisor; }
  DPX_HOST_DEVICE uint64_t mod(uint64_t n) const { return n % divisor; }
};

}  // namespace dpx::cuda
