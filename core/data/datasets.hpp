// The data sets dpx knows by name (fashion-mnist, mnist, synthetic, imagefolder, tinyimagenet) and
// the one call the trainer makes to get one, already transformed to the model's input shape.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.hpp"
#include "core/data/image_dataset.hpp"

namespace dpx::data {

struct DatasetSpec {
  std::string name = "fashion-mnist";  // fashion-mnist | mnist | synthetic | imagefolder | tinyimagenet
  std::string dir;                     // IDX directory or image folder; empty: the default (Fashion-MNIST only)
  int image_size = 0;                  // resize to SxS; 0: the set's own (28; synthetic: 28; imagefolder:
                                       // 224; tinyimagenet: 64)
  int channels = 0;                    // 0: the set's own (1; image folders: 3); 3 replicates grey to RGB
  int64_t synthetic_size = 8192;       // synthetic train samples; its test split has a sixth
  int num_classes = 10;                // synthetic only (the IDX sets have 10)
  uint64_t seed = 0;                   // synthetic only
  bool normalize = true;               // IDX sets: normalise with the set's mean and std
  // Image folders: transforms (size from image_size) and the bad-file policy.
  ImageSetOptions images;
};

// The side an image folder's samples get when --image-size is 0: 224 (ImageNet's) for imagefolder,
// 64 (its own) for tinyimagenet.
int default_image_size(const std::string& dataset);

const std::vector<std::string>& dataset_names();

// What a set's images are normalised with, per channel (one value for the grey IDX sets): what
// make_dataset applies, and what dpx train --save records for dpx infer. Empty: none (synthetic
// data, or spec.normalize off).
struct Normalisation {
  std::vector<float> mean, std;
};
Normalisation normalisation_of(const DatasetSpec& spec);

// Loads (or generates) a split and chains the transforms to (channels, image_size, image_size).
// Throws dpx::UsageError for an unknown name, dpx::Error for missing or bad files.
std::shared_ptr<const Dataset> make_dataset(const DatasetSpec& spec, Split split);

}  // namespace dpx::data
