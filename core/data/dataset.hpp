// Dataset: what the loader reads samples from. One sample is a (C, H, W) float image and an
// int64 class label. get() is const and thread-safe, so loader workers call it concurrently
// without locks; implementations keep their data immutable after construction.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.hpp"

namespace dpx::data {

enum class Split { train, test };
std::string split_name(Split s);

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // (C, H, W) of every sample.
  virtual Shape sample_shape() const = 0;
  virtual int64_t num_classes() const = 0;
  // Writes sample i: C*H*W floats to image_chw (row-major) and its class to *label.
  // 0 <= i < size(); thread-safe.
  virtual void get(int64_t i, float* image_chw, int64_t* label) const = 0;
  // Sample i as epoch `epoch` sees it: data sets with random augmentation draw it from (their seed,
  // epoch, i) only, so any worker, rank or resumed run gets the same bits. Returns false when the
  // sample is skipped (an unreadable image under --on-bad-image skip); nothing is written then.
  // The loader calls this one; by default it is get().
  virtual bool fetch(int64_t i, int64_t epoch, float* image_chw, int64_t* label) const {
    get(i, image_chw, label);
    return true;
  }
  // One line for logs: "fashion-mnist train (60000 x (1, 28, 28), 10 classes)".
  virtual std::string describe() const = 0;

  int64_t sample_numel() const { return shape_numel(sample_shape()); }
};

// The shared part of describe(): "NAME (N x (C, H, W), K classes)".
std::string describe_dataset(const std::string& name, const Dataset& d);

}  // namespace dpx::data
