// MNIST and Fashion-MNIST from their IDX files, and IdxDataset for any pair of IDX image and
// label files. Images are kept as loaded (u8 for these sets, 47 MB for 60000 samples) and scaled
// to [0, 1] per sample in get(), so the loader's workers share the cost.
#pragma once
#include <memory>
#include <string>

#include "core/data/dataset.hpp"

namespace dpx::data {

// Per-channel statistics of the training images after scaling to [0, 1], for normalise().
// Fashion-MNIST: computed over its 60000 training images (tests/core/test_data_mnist.cpp
// recomputes them from the installed files). MNIST: the values of PyTorch's examples/mnist.
inline constexpr float kFashionMnistMean = 0.2860f, kFashionMnistStd = 0.3530f;
inline constexpr float kMnistMean = 0.1307f, kMnistStd = 0.3081f;

// Where the Debian package dataset-fashion-mnist installs the files (`dpkg -L dataset-fashion-mnist`).
inline constexpr const char* kFashionMnistPackageDir = "/usr/share/datasets/fashion-mnist";

// Samples from an IDX image file ((N, H, W) or (N, C, H, W); u8 scaled by 1/255, or f32/f64
// taken as they are) and an IDX label file ((N), any integer type, each in [0, num_classes)).
class IdxDataset : public Dataset {
 public:
  IdxDataset(const std::string& images_path, const std::string& labels_path, int64_t num_classes,
             std::string name);
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return num_classes_; }
  void get(int64_t i, float* image_chw, int64_t* label) const override;
  std::string describe() const override;
  const Tensor& images() const { return images_; }  // (N, C, H, W) u8 or f32, as stored
  const Tensor& labels() const { return labels_; }  // (N) i64

 private:
  Tensor images_, labels_;
  Shape shape_;
  int64_t n_ = 0, num_classes_ = 0;
  std::string name_;
};

// The directory to read Fashion-MNIST from: `dir` when given, else $DPX_DATA_DIR (the directory
// holding the four IDX files), else kFashionMnistPackageDir.
std::string fashion_mnist_dir(const std::string& dir);

// {train,t10k}-{images-idx3,labels-idx1}-ubyte from `dir`, raw or .gz (also the
// "train-images.idx3-ubyte" spelling some mirrors use). 10 classes.
std::shared_ptr<const IdxDataset> load_fashion_mnist(const std::string& dir, Split split);
// MNIST has no default location: `dir` is required (the error says to pass --data-dir).
std::shared_ptr<const IdxDataset> load_mnist(const std::string& dir, Split split);

}  // namespace dpx::data
