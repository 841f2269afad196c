// Per-sample image transforms, run by the loader's workers: normalise, bilinear resize (as
// PyTorch's interpolate) and grey -> RGB. with_transforms() chains them over a Dataset, which is
// how the studies' 28x28 grey images become a model's 224x224x3 input (docs/ARCHITECTURE.md,
// Studies).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.hpp"

namespace dpx::data {

class Transform {
 public:
  virtual ~Transform() = default;
  // The (C, H, W) produced from an input of shape `in`; throws if this transform cannot take it.
  virtual Shape output_shape(const Shape& in) const = 0;
  // out (output_shape(in) floats) from in (in_shape); the two do not overlap. Thread-safe.
  virtual void apply(float* out, const float* in, const Shape& in_shape) const = 0;
  virtual std::string describe() const = 0;
};
using TransformPtr = std::shared_ptr<const Transform>;

// (x - mean[c]) / std[c] per channel, as torchvision.transforms.Normalize. One value applies to
// every channel. See mnist.hpp for the Fashion-MNIST and MNIST constants.
TransformPtr normalize(std::vector<float> mean, std::vector<float> std);
// Bilinear resize of every channel to (height, width), equal to
// torch.nn.functional.interpolate(mode='bilinear', align_corners=False, antialias=False).
TransformPtr resize(int64_t height, int64_t width);
// One grey channel replicated to `channels` (3 for RGB models).
TransformPtr grey_to_rgb(int64_t channels = 3);

// The resize kernel itself. out: (C, out_h, out_w); in: (C, in_h, in_w).
void resize_bilinear(float* out, const float* in, int64_t C, int64_t in_h, int64_t in_w, int64_t out_h,
                     int64_t out_w);

// A dataset whose samples are base's passed through `transforms` in order.
class TransformedDataset : public Dataset {
 public:
  TransformedDataset(std::shared_ptr<const Dataset> base, std::vector<TransformPtr> transforms);
  int64_t size() const override { return base_->size(); }
  Shape sample_shape() const override { return shapes_.back(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  void get(int64_t i, float* image_chw, int64_t* label) const override;
  std::string describe() const override;
  const Dataset& base() const { return *base_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<TransformPtr> transforms_;
  std::vector<Shape> shapes_;  // shapes_[k]: input of transforms_[k]; back(): the output
};

std::shared_ptr<const Dataset> with_transforms(std::shared_ptr<const Dataset> base, std::vector<TransformPtr> transforms);

// The usual chain from a data set to a model's input: normalise with (mean, std) when `std` > 0,
// resize to (height, width) when it differs, then replicate grey to `channels` when asked.
// Normalising first costs least (on the small image) and equals normalising after the resize up
// to float rounding, because bilinear weights sum to one.
std::vector<TransformPtr> model_input_transforms(const Shape& sample_chw, int64_t channels, int64_t height,
                                                 int64_t width, float mean, float std);

}  // namespace dpx::data
