// ImageFolderDataset: the samples of a folder of JPEG and PNG files (image_folder.hpp), each read,
// decoded and transformed as torchvision's ImageFolder with its ImageNet transforms
// (image_transforms.hpp) when a loader worker asks for it. Training samples are augmented by
// draws from (seed, epoch, index) only. A file that cannot be read or decoded stops the run with
// its name, or is skipped and counted (--on-bad-image skip).
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "core/data/dataset.hpp"
#include "core/data/image_folder.hpp"
#include "core/data/image_transforms.hpp"

namespace dpx::data {

enum class BadImagePolicy { stop, skip };
BadImagePolicy parse_bad_image_policy(const std::string& s);  // "stop" | "skip"; UsageError naming --on-bad-image
std::string bad_image_policy_name(BadImagePolicy p);

// What --dataset imagefolder and tinyimagenet take besides the folder (docs/data.md).
struct ImageSetOptions {
  ImageTransformOptions transform;  // transform.train is set per split
  BadImagePolicy on_bad_image = BadImagePolicy::stop;
};

class ImageFolderDataset : public Dataset {
 public:
  // `transform.train` picks the training or the evaluation transforms; `seed` the augmentation.
  ImageFolderDataset(FolderIndex index, ImageTransformOptions transform, BadImagePolicy on_bad_image, uint64_t seed,
                     std::string name);
  int64_t size() const override { return index_.size(); }
  Shape sample_shape() const override { return {3, transform_.size, transform_.size}; }
  int64_t num_classes() const override { return static_cast<int64_t>(index_.classes.size()); }
  // Epoch 0's version of sample i; throws BadImage for a bad file whatever the policy.
  void get(int64_t i, float* image_chw, int64_t* label) const override;
  bool fetch(int64_t i, int64_t epoch, float* image_chw, int64_t* label) const override;
  std::string describe() const override;

  const FolderIndex& index() const { return index_; }
  const ImageTransformOptions& transform() const { return transform_; }
  // Bad files skipped so far (each time one is met), and the first few distinct ones.
  int64_t skipped() const { return skipped_.load(std::memory_order_relaxed); }

 private:
  // Sample i of epoch `epoch`; throws BadImage.
  void load(int64_t i, int64_t epoch, float* image_chw) const;

  FolderIndex index_;
  ImageTransformOptions transform_;
  NormalizeTable normalize_;
  BadImagePolicy on_bad_image_;
  uint64_t seed_;
  std::string name_;
  mutable std::atomic<int64_t> skipped_{0};
  mutable std::mutex warned_mu_;
  mutable std::set<int64_t> warned_;  // files already named in a warning (at most kMaxWarnings)
};

// Loads a split of an image folder (layout imagefolder or tinyimagenet) at `dir`: the index, then
// the data set with the split's transforms. The test split of an imagefolder must have the
// training split's classes (checked here, by indexing both). Throws UsageError naming --data-dir.
std::shared_ptr<const ImageFolderDataset> load_image_folder(FolderLayout layout, const std::string& dir, Split split,
                                                            const ImageSetOptions& options, uint64_t seed);

}  // namespace dpx::data
