// IdxDataset and the MNIST / Fashion-MNIST loaders: file discovery, shape and label checks,
// and errors that say where dpx looked and how to get the files.
#include "core/data/mnist.hpp"

#include <array>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/data/idx.hpp"

namespace dpx::data {

namespace {

const char* kInstallHint =
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist), "
    "pass --data-dir DIR or set DPX_DATA_DIR";
const char* kMnistHint =
    "pass --data-dir DIR with MNIST's train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
    "t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz] (e.g. torchvision's MNIST/raw)";

// `stem` is e.g. "train-images" + "idx3": the spellings found in the wild, raw before gzip.
std::string find_file(const std::string& dir, const std::string& stem, const std::string& kind,
                      const std::string& set_name, const char* hint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(set_name, " not found: '", dir, "' is not a directory; ", hint);
  auto dash = stem.rfind('-');
  std::string a = stem + "-ubyte", b = stem.substr(0, dash) + "." + stem.substr(dash + 1) + "-ubyte";
  std::vector<std::string> tried = {a, a + ".gz", b, b + ".gz"};
  for (const auto& name : tried) {
    fs::path p = fs::path(dir) / name;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  fail(set_name, " ", kind, " not found in '", dir, "': looked for ", tried[0], ", ", tried[1], ", ", tried[2],
       " and ", tried[3], "; ", hint);
}

std::shared_ptr<const IdxDataset> load_pair(const std::string& dir, Split split, const std::string& set_name,
                                            const char* hint) {
  std::string prefix = split == Split::train ? "train" : "t10k";
  std::string images = find_file(dir, prefix + "-images-idx3", "images", set_name, hint);
  std::string labels = find_file(dir, prefix + "-labels-idx1", "labels", set_name, hint);
  return std::make_shared<IdxDataset>(images, labels, 10, set_name + " " + split_name(split));
}

}  // namespace

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path, int64_t num_classes,
                       std::string name)
    : num_classes_(num_classes), name_(std::move(name)) {
  if (num_classes < 1) fail(name_, ": num_classes must be at least 1, got ", num_classes);
  Tensor images = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  const Shape& s = images.shape();
  if (s.size() == 3) {
    images = images.view({s[0], 1, s[1], s[2]});
  } else if (s.size() != 4) {
    fail("'", images_path, "': images need IDX dimensions (N, H, W) or (N, C, H, W), found ", shape_str(s));
  }
  if (images.dtype() == DType::f64) {  // kept as f32: the loader produces f32 batches anyway
    Tensor f = Tensor::empty(images.shape(), DType::f32);
    const double* src = images.data<double>();
    float* dst = f.data<float>();
    for (int64_t i = 0; i < images.numel(); ++i) dst[i] = static_cast<float>(src[i]);
    images = f;
  }
  if (images.dtype() != DType::u8 && images.dtype() != DType::f32)
    fail("'", images_path, "': image elements must be u8, f32 or f64, found ", dtype_name(images.dtype()));
  if (labels.dim() != 1)
    fail("'", labels_path, "': labels need IDX dimensions (N), found ", shape_str(labels.shape()));
  if (labels.dtype() != DType::u8 && labels.dtype() != DType::i32)
    fail("'", labels_path, "': labels must be integers, found ", dtype_name(labels.dtype()), " elements");
  n_ = images.size(0);
  if (labels.size(0) != n_)
    fail(name_, ": image/label count mismatch: '", images_path, "' holds ", n_, " images but '", labels_path,
         "' holds ", labels.size(0), " labels; the two files must come from the same set and split");
  labels_ = Tensor::empty({n_}, DType::i64);
  int64_t* out = labels_.data<int64_t>();
  for (int64_t i = 0; i < n_; ++i) {
    out[i] = labels.dtype() == DType::u8 ? labels.data<uint8_t>()[i] : labels.data<int32_t>()[i];
    if (out[i] < 0 || out[i] >= num_classes_)
      fail("'", labels_path, "': label ", out[i], " of sample ", i, " is outside [0, ", num_classes_, ")");
  }
  images_ = images;
  shape_ = {images.size(1), images.size(2), images.size(3)};
}

void IdxDataset::get(int64_t i, float* image_chw, int64_t* label) const {
  DPX_CHECK(i >= 0 && i < n_, name_, ": sample ", i, " out of range [0, ", n_, ")");
  const int64_t m = shape_numel(shape_);
  if (images_.dtype() == DType::u8) {
    // x / 255 exactly as torchvision's ToTensor divides (a multiply by 1/255 differs in the last bit).
    static const auto scale = [] {
      std::array<float, 256> t{};
      for (int v = 0; v < 256; ++v) t[v] = static_cast<float>(v) / 255.0f;
      return t;
    }();
    const uint8_t* src = images_.data<uint8_t>() + i * m;
    for (int64_t j = 0; j < m; ++j) image_chw[j] = scale[src[j]];
  } else {
    const float* src = images_.data<float>() + i * m;
    std::copy(src, src + m, image_chw);
  }
  *label = labels_.data<int64_t>()[i];
}

std::string IdxDataset::describe() const { return describe_dataset(name_, *this); }

std::string fashion_mnist_dir(const std::string& dir) {
  if (!dir.empty()) return dir;
  if (const char* env = std::getenv("DPX_DATA_DIR"); env && *env) return env;
  return kFashionMnistPackageDir;
}

std::shared_ptr<const IdxDataset> load_fashion_mnist(const std::string& dir, Split split) {
  return load_pair(fashion_mnist_dir(dir), split, "fashion-mnist", kInstallHint);
}

std::shared_ptr<const IdxDataset> load_mnist(const std::string& dir, Split split) {
  if (dir.empty()) fail("MNIST has no default location: ", kMnistHint);
  return load_pair(dir, split, "mnist", kMnistHint);
}

}  // namespace dpx::data
