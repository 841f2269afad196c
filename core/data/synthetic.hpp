// SyntheticDataset: deterministic images of any (C, H, W) for throughput work and tests. Sample
// i depends only on the seed and i (counter-based Philox), so any worker, rank or run that asks
// for it gets the same bits; each class has its own pattern, so a model can really learn it.
#pragma once
#include <cstdint>
#include <string>

#include "core/data/dataset.hpp"

namespace dpx::data {

struct SyntheticOptions {
  int64_t size = 8192;             // samples
  Shape sample_shape = {1, 28, 28};  // (C, H, W)
  int64_t num_classes = 10;
  uint64_t seed = 0;               // picks the class patterns (shared by every split)
  uint64_t sample_stream = 0;      // picks the noise: 0 for train, 1 for test, so the splits differ
  float noise = 0.2f;              // each pixel gets uniform noise in [-noise, noise]
};

// Sample i: label = i % num_classes (every class equally often), image = 0.5 + 0.25 *
// pattern(label) + noise, where pattern(k) is, per channel, a product of a row and a column
// cosine with class-dependent frequencies (1 to 3 cycles) and phases. Values stay in [0, 1]
// for noise <= 0.25, like scaled pixels.
class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(SyntheticOptions options);
  int64_t size() const override { return o_.size; }
  Shape sample_shape() const override { return o_.sample_shape; }
  int64_t num_classes() const override { return o_.num_classes; }
  void get(int64_t i, float* image_chw, int64_t* label) const override;
  std::string describe() const override;
  const SyntheticOptions& options() const { return o_; }

 private:
  SyntheticOptions o_;
};

}  // namespace dpx::data
