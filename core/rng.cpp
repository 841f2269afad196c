// Rng (on the Philox-4x32-10 of core/philox.hpp) and the host fills built on it. A fill's
// element i depends only on its counter, so large fills run on every core (OpenMP) with the
// same numbers as on one: initialising VGG's 138M parameters is otherwise seconds of Box-Muller
// on one core.
#include "core/rng.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.hpp"

namespace dpx {

namespace {
constexpr int64_t kParallelFill = 1 << 18;  // elements; below this a fill stays on one thread
thread_local bool t_draw_nothing = false;   // a DrawNothing lives on this thread
}  // namespace

DrawNothing::DrawNothing() : outer_(!t_draw_nothing) { t_draw_nothing = true; }
DrawNothing::~DrawNothing() {
  if (outer_) t_draw_nothing = false;
}

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  const philox::Block b = philox::philox4x32(key, counter_hi, counter_lo);
  return {b.word[0], b.word[1], b.word[2], b.word[3]};
}

uint32_t Rng::bits_at(uint64_t c) const { return philox4x32(seed_, stream_, c)[0]; }

float Rng::uniform_at(uint64_t c) const { return philox::uniform_from_bits(bits_at(c)); }

float Rng::normal_at(uint64_t c) const {
  auto r = philox4x32(seed_, stream_, c);
  double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967297.0;  // (0, 1]
  double u2 = static_cast<double>(r[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

namespace {
// Element i of host tensor t = value(first counter of element i), each element owning `draws`
// consecutive counters taken from rng: the values do not depend on the number of threads.
template <class Value>
void fill_host(const char* who, Tensor& t, Rng& rng, uint64_t draws, Value value) {
  DPX_CHECK(t.device().is_cpu(), who, " works on host tensors");
  float* p = t.data<float>();
  const int64_t n = t.numel();
  uint64_t base = rng.advance(static_cast<uint64_t>(n) * draws);
  if (t_draw_nothing) {
    std::fill(p, p + n, 0.f);
    return;
  }
#pragma omp parallel for schedule(static) if (n >= kParallelFill)
  for (int64_t i = 0; i < n; ++i) p[i] = value(base + static_cast<uint64_t>(i) * draws);
}
}  // namespace

void fill_uniform(Tensor& t, Rng& rng, float lo, float hi) {
  fill_host("fill_uniform", t, rng, 1, [&](uint64_t c) { return lo + (hi - lo) * rng.uniform_at(c); });
}

void fill_normal(Tensor& t, Rng& rng, float mean, float stddev) {
  fill_host("fill_normal", t, rng, 1, [&](uint64_t c) { return mean + stddev * rng.normal_at(c); });
}

void fill_trunc_normal(Tensor& t, Rng& rng, float mean, float stddev, float lo, float hi) {
  // Up to 64 draws per element until one lands in [lo, hi]; clamped if none does.
  fill_host("fill_trunc_normal", t, rng, 64, [&](uint64_t c) {
    float v = mean;
    for (uint64_t attempt = 0; attempt < 64; ++attempt) {
      v = mean + stddev * rng.normal_at(c + attempt);
      if (v >= lo && v <= hi) break;
    }
    return std::min(std::max(v, lo), hi);
  });
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
