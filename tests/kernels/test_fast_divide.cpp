// FastDivide (kernels/cuda/fast_divide.hpp), the CUDA kernels' division by a multiply-high: its
// host form, the same arithmetic as the device's __umulhi, against the hardware division over the
// divisors and numerators the kernels meet (every n below 2^31) and their edges.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/fast_divide.hpp"

using dpx::cuda::FastDivide;

TEST_CASE("FastDivide's quotient and remainder equal the hardware's for every n below 2^31") {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 4100; ++d) divisors.push_back(d);
  for (uint32_t shift = 12; shift < 31; ++shift)
    for (uint32_t d : {(1u << shift) - 1, 1u << shift, (1u << shift) + 1, 3u << (shift - 1)}) divisors.push_back(d);
  for (uint32_t d : {12544u, 50176u, 200704u, 802816u, 2147483647u, 2147483648u}) divisors.push_back(d);
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> any(0, (1u << 31) - 1);
  int64_t wrong = 0;
  for (uint32_t d : divisors) {
    const FastDivide f(d);
    std::vector<uint32_t> ns = {0u, 1u, d - 1, d, d + 1, (1u << 31) - 1, (1u << 31) - 2};
    const uint64_t top = (uint64_t(1) << 31) - 1;
    const uint64_t last_multiple = top / d * d;
    for (uint64_t n : {last_multiple, last_multiple - 1, last_multiple + d - 1, uint64_t(2) * d - 1, uint64_t(2) * d})
      if (n <= top) ns.push_back(static_cast<uint32_t>(n));
    for (int i = 0; i < 200; ++i) ns.push_back(any(gen));
    for (uint32_t n : ns) {
      if (n >= (1u << 31)) continue;
      if (f.div(n) != n / d || f.mod(n) != n % d) {
        if (wrong++ < 5) FAIL_CHECK("d " << d << " n " << n << ": got " << f.div(n) << " rem " << f.mod(n));
      }
    }
  }
  CHECK(wrong == 0);
  // quotient() divides by the FastDivide with 32-bit indices, by the hardware with 64-bit ones.
  const FastDivide seven(7);
  CHECK(dpx::cuda::quotient<uint32_t>(2000000000u, 7u, seven) == 2000000000u / 7u);
  CHECK(dpx::cuda::quotient<int32_t>(1999999999, 7, seven) == 1999999999 / 7);
  CHECK(dpx::cuda::quotient<int64_t>(int64_t(1) << 40, 7, FastDivide()) == (int64_t(1) << 40) / 7);
  // The default is division by 1; a divisor outside [1, 2^31] is refused.
  const FastDivide one;
  CHECK(one.div(123456789u) == 123456789u);
  CHECK(one.mod(123456789u) == 0u);
  CHECK_THROWS_AS(FastDivide(0u), dpx::Error);
  CHECK_THROWS_AS(FastDivide((1u << 31) + 1), dpx::Error);
}
