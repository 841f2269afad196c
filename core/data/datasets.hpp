// The data sets dpx knows by name (fashion-mnist, mnist, synthetic) and the one call the trainer
// makes to get one, already transformed to the model's input shape.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.hpp"

namespace dpx::data {

struct DatasetSpec {
  std::string name = "fashion-mnist";  // fashion-mnist | mnist | synthetic
  std::string dir;                     // IDX directory; empty: the default (Fashion-MNIST only)
  int image_size = 0;                  // resize to SxS; 0: the set's own (28; synthetic: 28)
  int channels = 0;                    // 0: the set's own (1); 3 replicates grey to RGB
  int64_t synthetic_size = 8192;       // synthetic train samples; its test split has a sixth
  int num_classes = 10;                // synthetic only (the IDX sets have 10)
  uint64_t seed = 0;                   // synthetic only
  bool normalize = true;               // IDX sets: normalise with the set's mean and std
};

const std::vector<std::string>& dataset_names();

// Loads (or generates) a split and chains the transforms to (channels, image_size, image_size).
// Throws dpx::UsageError for an unknown name, dpx::Error for missing or bad files.
std::shared_ptr<const Dataset> make_dataset(const DatasetSpec& spec, Split split);

}  // namespace dpx::data
