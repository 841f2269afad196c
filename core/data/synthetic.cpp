// SyntheticDataset. Patterns are computed per sample from a few Philox draws (no table, so a
// 1000-class 224x224x3 set costs no memory); noise takes eight 16-bit values from each Philox call.
#include "core/data/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.hpp"

namespace dpx::data {

namespace {
constexpr float kTwoPi = 6.283185307179586f;
}

SyntheticDataset::SyntheticDataset(SyntheticOptions options) : o_(std::move(options)) {
  const Shape& s = o_.sample_shape;
  if (s.size() != 3 || s[0] < 1 || s[1] < 1 || s[2] < 1)
    fail("synthetic data set: the sample shape must be (C, H, W) with every size >= 1, got ", shape_str(s));
  if (o_.size < 1) fail("synthetic data set: size must be at least 1, got ", o_.size);
  if (o_.num_classes < 1) fail("synthetic data set: num_classes must be at least 1, got ", o_.num_classes);
  if (!(o_.noise >= 0)) fail("synthetic data set: noise must be >= 0, got ", o_.noise);
}

void SyntheticDataset::get(int64_t i, float* image_chw, int64_t* label) const {
  DPX_CHECK(i >= 0 && i < o_.size, "synthetic data set: sample ", i, " out of range [0, ", o_.size, ")");
  const int64_t C = o_.sample_shape[0], H = o_.sample_shape[1], W = o_.sample_shape[2];
  const int64_t k = i % o_.num_classes;
  *label = k;
  // Class pattern: 4 draws per (class, channel) from stream 0 of the seed.
  const Rng pattern_rng(o_.seed, 0);
  std::vector<float> rows(static_cast<size_t>(H)), cols(static_cast<size_t>(W));
  // Noise: stream 1 + sample_stream; sample i owns counters [i * blocks, (i + 1) * blocks).
  const uint64_t numel = static_cast<uint64_t>(C * H * W), blocks = (numel + 7) / 8;
  const Rng noise_rng(o_.seed, 1 + o_.sample_stream);
  const float amp = 2.f * o_.noise;
  for (int64_t c = 0; c < C; ++c) {
    const uint64_t base = static_cast<uint64_t>(k * C + c) * 4;
    const float fy = 1.f + std::floor(3.f * pattern_rng.uniform_at(base + 0));
    const float fx = 1.f + std::floor(3.f * pattern_rng.uniform_at(base + 1));
    const float py = kTwoPi * pattern_rng.uniform_at(base + 2), px = kTwoPi * pattern_rng.uniform_at(base + 3);
    for (int64_t y = 0; y < H; ++y)
      rows[y] = std::cos(kTwoPi * fy * (static_cast<float>(y) + 0.5f) / static_cast<float>(H) + py);
    for (int64_t x = 0; x < W; ++x)
      cols[x] = std::cos(kTwoPi * fx * (static_cast<float>(x) + 0.5f) / static_cast<float>(W) + px);
    float* out = image_chw + c * H * W;
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) out[y * W + x] = 0.5f + 0.25f * rows[y] * cols[x];
  }
  // Eight 16-bit uniforms per Philox call: plenty of resolution for noise, at 1/8 of the calls.
  const uint64_t first = static_cast<uint64_t>(i) * blocks;
  for (uint64_t b = 0; b < blocks; ++b) {
    const auto r = philox4x32(noise_rng.seed(), noise_rng.stream(), first + b);
    const uint64_t count = std::min<uint64_t>(8, numel - 8 * b);
    float* px = image_chw + 8 * b;
    for (uint64_t k = 0; k < count; ++k) {
      const uint32_t bits = (r[k >> 1] >> (16 * (k & 1))) & 0xFFFFu;
      px[k] += amp * ((static_cast<float>(bits) + 0.5f) * (1.0f / 65536.0f) - 0.5f);  // u in (0, 1)
    }
  }
}

std::string SyntheticDataset::describe() const { return describe_dataset("synthetic", *this); }

}  // namespace dpx::data
