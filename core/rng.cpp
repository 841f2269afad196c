// Philox-4x32-10 and the host fills built on it. A fill's element i depends only on its counter,
// so large fills run on every core (OpenMP) with the same numbers as on one: initialising
// VGG's 138M parameters is otherwise seconds of Box-Muller on one core.
#include "core/rng.hpp"

#include <cmath>
#include <numeric>

namespace dpx {

namespace {
constexpr int64_t kParallelFill = 1 << 18;  // elements; below this a fill stays on one thread
}  // namespace

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
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
  return {c0, c1, c2, c3};
}

uint32_t Rng::bits_at(uint64_t c) const { return philox4x32(seed_, stream_, c)[0]; }

float Rng::uniform_at(uint64_t c) const {
  return static_cast<float>(bits_at(c) >> 8) * (1.0f / 16777216.0f);
}

float Rng::normal_at(uint64_t c) const {
  auto r = philox4x32(seed_, stream_, c);
  double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967297.0;  // (0, 1]
  double u2 = static_cast<double>(r[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void fill_uniform(Tensor& t, Rng& rng, float lo, float hi) {
  DPX_CHECK(t.device().is_cpu(), "fill_uniform works on host tensors");
  float* p = t.data<float>();
  const int64_t n = t.numel();
  uint64_t base = rng.advance(static_cast<uint64_t>(n));
#pragma omp parallel for schedule(static) if (n >= kParallelFill)
  for (int64_t i = 0; i < n; ++i) p[i] = lo + (hi - lo) * rng.uniform_at(base + i);
}

void fill_normal(Tensor& t, Rng& rng, float mean, float stddev) {
  DPX_CHECK(t.device().is_cpu(), "fill_normal works on host tensors");
  float* p = t.data<float>();
  const int64_t n = t.numel();
  uint64_t base = rng.advance(static_cast<uint64_t>(n));
#pragma omp parallel for schedule(static) if (n >= kParallelFill)
  for (int64_t i = 0; i < n; ++i) p[i] = mean + stddev * rng.normal_at(base + i);
}

void fill_trunc_normal(Tensor& t, Rng& rng, float mean, float stddev, float lo, float hi) {
  DPX_CHECK(t.device().is_cpu(), "fill_trunc_normal works on host tensors");
  float* p = t.data<float>();
  const int64_t n = t.numel();
  uint64_t base = rng.advance(static_cast<uint64_t>(n) * 64);
#pragma omp parallel for schedule(static) if (n >= kParallelFill)
  for (int64_t i = 0; i < n; ++i) {
    float v = mean;
    for (uint64_t attempt = 0; attempt < 64; ++attempt) {
      v = mean + stddev * rng.normal_at(base + static_cast<uint64_t>(i) * 64 + attempt);
      if (v >= lo && v <= hi) break;
    }
    p[i] = std::min(std::max(v, lo), hi);
  }
}

std::vector<int64_t> permutation(int64_t n, Rng& rng) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  uint64_t base = rng.advance(static_cast<uint64_t>(n));
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t r = (static_cast<uint64_t>(rng.bits_at(base + i)) << 32) | rng.bits_at(base + i + n);
    std::swap(p[i], p[r % static_cast<uint64_t>(i + 1)]);
  }
  return p;
}

}  // namespace dpx
