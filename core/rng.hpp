// Counter-based RNG (Philox-4x32-10). Element i of a fill uses counter (offset + i), so the
// numbers depend only on the seed and the position — never on the number of threads.
#pragma once
#include <array>
#include <cstdint>

#include "core/context.hpp"
#include "core/tensor.hpp"

namespace dpx {

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0) : seed_(seed), stream_(stream) {}
  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  uint64_t offset() const { return offset_; }
  // Reserves n consecutive counters and returns the first.
  uint64_t advance(uint64_t n) { uint64_t o = offset_; offset_ += n; return o; }
  // A new independent generator, e.g. one per layer or per epoch.
  Rng fork(uint64_t stream) const { return Rng(seed_, stream_ * 0x9E3779B97F4A7C15ull + stream + 1); }

  // Uniform in [0, 1) for counter c of this generator (24-bit mantissa resolution).
  float uniform_at(uint64_t c) const;
  // Standard normal for counter c (Box-Muller on one Philox block).
  float normal_at(uint64_t c) const;
  uint32_t bits_at(uint64_t c) const;

  float uniform() { return uniform_at(advance(1)); }
  uint32_t next_u32() { return bits_at(advance(1)); }

 private:
  uint64_t seed_, stream_, offset_ = 0;
};

// The value of ctx.random_offset (0 when unset) for the host's random kernels: a CUDA graph's
// replay count, rehearsed on the CPU (see Context::random_offset).
inline uint64_t host_random_offset(const Context& ctx) {
  return ctx.random_offset ? static_cast<uint64_t>(ctx.random_offset->data<int64_t>()[0]) : 0;
}

// While a DrawNothing lives on this thread, the fills below write zeros and draw nothing (the
// generator still advances as if they had): for building a model only to count its parameters,
// FLOPs and activations (dpx models), where drawing VGG's 138M normals was most of the time.
class DrawNothing {
 public:
  DrawNothing();
  ~DrawNothing();
  DrawNothing(const DrawNothing&) = delete;
  DrawNothing& operator=(const DrawNothing&) = delete;

 private:
  bool outer_;
};

// Host f32 fills (init happens on the host; weights are then copied to their device).
void fill_uniform(Tensor& t, Rng& rng, float lo, float hi);
void fill_normal(Tensor& t, Rng& rng, float mean, float stddev);
// Normal truncated to [lo, hi] by redrawing, as torch.nn.init.trunc_normal_.
void fill_trunc_normal(Tensor& t, Rng& rng, float mean, float stddev, float lo, float hi);
// A permutation of 0..n-1 (Fisher-Yates driven by this generator).
std::vector<int64_t> permutation(int64_t n, Rng& rng);

}  // namespace dpx
