// Tests of the IDX-backed data sets: IdxDataset on small files written here, the checks and
// messages of the MNIST / Fashion-MNIST loaders, make_dataset, and the real Fashion-MNIST from
// the Debian package (skipped with a message where it is not installed).
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/data/datasets.hpp"
#include "core/data/idx.hpp"
#include "core/data/mnist.hpp"
#include "tests/common/files.hpp"
#include "tests/common/errors.hpp"

namespace fs = std::filesystem;
using dpx::DType;
using dpx::Shape;
using dpx::Tensor;
using namespace dpx::data;

using dpx::testing::contains;
using dpx::testing::error_of;

namespace {

// Every test's files go into its own TempDir (tests/common/files.hpp), tagged "mnist".
struct TempDir : dpx::testing::TempDir {
  TempDir() : dpx::testing::TempDir("mnist") {}
};

// Sets an environment variable for one scope, restoring the old value after.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const std::string& n, const char* value) : name(n) {
    if (const char* v = std::getenv(n.c_str())) old = v;
    if (value) setenv(n.c_str(), value, 1);
    else unsetenv(n.c_str());
  }
  ~ScopedEnv() {
    if (old) setenv(name.c_str(), old->c_str(), 1);
    else unsetenv(name.c_str());
  }
};

// n images of h x w: pixel j of image i = (i * 31 + j) % 256; label i = i % 10.
void write_mnist_like(const TempDir& dir, const std::string& prefix, int64_t n, int64_t h, int64_t w, bool gz,
                      int64_t n_labels = -1) {
  Tensor images = Tensor::empty({n, h, w}, DType::u8);
  for (int64_t i = 0; i < images.numel(); ++i)
    images.data<uint8_t>()[i] = static_cast<uint8_t>(((i / (h * w)) * 31 + i % (h * w)) % 256);
  if (n_labels < 0) n_labels = n;
  Tensor labels = Tensor::empty({n_labels}, DType::u8);
  for (int64_t i = 0; i < n_labels; ++i) labels.data<uint8_t>()[i] = static_cast<uint8_t>(i % 10);
  std::string ext = gz ? ".gz" : "";
  write_idx(dir.file(prefix + "-images-idx3-ubyte" + ext), images, IdxType::u8, gz);
  write_idx(dir.file(prefix + "-labels-idx1-ubyte" + ext), labels, IdxType::u8, gz);
}

}  // namespace

TEST_CASE("IdxDataset: u8 images scaled to [0, 1], labels as int64, raw or gzip files") {
  TempDir dir;
  write_mnist_like(dir, "train", 12, 4, 3, /*gz=*/true);
  write_mnist_like(dir, "t10k", 5, 4, 3, /*gz=*/false);
  auto train = load_fashion_mnist(dir.path.string(), Split::train);
  auto test = load_mnist(dir.path.string(), Split::test);
  CHECK(train->size() == 12);
  CHECK(test->size() == 5);
  CHECK(train->sample_shape() == Shape{1, 4, 3});
  CHECK(train->num_classes() == 10);
  CHECK(train->describe() == "fashion-mnist train (12 x (1, 4, 3), 10 classes)");
  std::vector<float> img(12);
  int64_t label = -1;
  train->get(11, img.data(), &label);
  CHECK(label == 1);
  for (int j = 0; j < 12; ++j) CHECK(img[j] == static_cast<float>((11 * 31 + j) % 256) / 255.f);
  CHECK(contains(error_of([&] { train->get(12, img.data(), &label); }), "sample 12 out of range [0, 12)"));
}

TEST_CASE("IdxDataset: (N, C, H, W) and float images; shape, count and label checks") {
  TempDir dir;
  Tensor images = Tensor::empty({2, 3, 2, 2}, DType::f32);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<float>()[i] = 0.5f * static_cast<float>(i);
  Tensor labels = Tensor::empty({2}, DType::i32);
  labels.data<int32_t>()[0] = 4;
  labels.data<int32_t>()[1] = 0;
  write_idx(dir.file("img"), images, IdxType::f64);
  write_idx(dir.file("lab"), labels, IdxType::i16);
  IdxDataset ds(dir.file("img"), dir.file("lab"), 5, "mine");
  CHECK(ds.sample_shape() == Shape{3, 2, 2});
  std::vector<float> img(12);
  int64_t label = -1;
  ds.get(1, img.data(), &label);
  CHECK(label == 0);
  CHECK(img[11] == 11.5f);

  std::string msg = error_of([&] { IdxDataset(dir.file("img"), dir.file("lab"), 4, "mine"); });
  CHECK(contains(msg, "label 4 of sample 0 is outside [0, 4)"));
  CHECK(contains(msg, dir.file("lab")));
  msg = error_of([&] { IdxDataset(dir.file("lab"), dir.file("lab"), 5, "mine"); });
  CHECK(contains(msg, "images need IDX dimensions (N, H, W) or (N, C, H, W), found (2)"));
  msg = error_of([&] { IdxDataset(dir.file("img"), dir.file("img"), 5, "mine"); });
  CHECK(contains(msg, "labels need IDX dimensions (N), found (2, 3, 2, 2)"));

  write_mnist_like(dir, "train", 6, 2, 2, false, /*n_labels=*/5);
  msg = error_of([&] { load_fashion_mnist(dir.path.string(), Split::train); });
  CHECK(contains(msg, "image/label count mismatch"));
  CHECK(contains(msg, "holds 6 images but"));
  CHECK(contains(msg, "holds 5 labels"));
}

TEST_CASE("fashion-mnist and mnist: missing files say where dpx looked and what to do") {
  TempDir dir;
  std::string missing = dir.file("nowhere");
  std::string msg = error_of([&] { load_fashion_mnist(missing, Split::train); });
  CHECK(contains(msg, "'" + missing + "' is not a directory"));
  CHECK(contains(msg, "install the Debian package dataset-fashion-mnist"));
  CHECK(contains(msg, "--data-dir"));
  msg = error_of([&] { load_fashion_mnist(dir.path.string(), Split::test); });
  CHECK(contains(msg, "fashion-mnist images not found in '" + dir.path.string() + "'"));
  CHECK(contains(msg, "t10k-images-idx3-ubyte, t10k-images-idx3-ubyte.gz, t10k-images.idx3-ubyte"));
  msg = error_of([] { load_mnist("", Split::train); });
  CHECK(contains(msg, "MNIST has no default location: pass --data-dir"));
  msg = error_of([&] { load_mnist(dir.path.string(), Split::train); });
  CHECK(contains(msg, "mnist images not found"));
  CHECK(contains(msg, "pass --data-dir"));
  // The dotted spelling some mirrors use is found too.
  write_mnist_like(dir, "t10k", 3, 2, 2, false);
  fs::rename(dir.file("t10k-images-idx3-ubyte"), dir.file("t10k-images.idx3-ubyte"));
  CHECK(load_mnist(dir.path.string(), Split::test)->size() == 3);
}

TEST_CASE("fashion_mnist_dir: --data-dir, then DPX_DATA_DIR, then the Debian package's directory") {
  {
    ScopedEnv env("DPX_DATA_DIR", nullptr);
    CHECK(fashion_mnist_dir("") == std::string(kFashionMnistPackageDir));
    CHECK(fashion_mnist_dir("mine") == "mine");
  }
  ScopedEnv env("DPX_DATA_DIR", "from-env");
  CHECK(fashion_mnist_dir("") == "from-env");
  CHECK(fashion_mnist_dir("mine") == "mine");
}

TEST_CASE("make_dataset: transforms to the asked input shape; synthetic splits; unknown names") {
  TempDir dir;
  write_mnist_like(dir, "train", 4, 28, 28, true);
  DatasetSpec spec;
  spec.dir = dir.path.string();
  spec.image_size = 32;
  spec.channels = 3;
  auto ds = make_dataset(spec, Split::train);
  CHECK(ds->sample_shape() == Shape{3, 32, 32});
  std::vector<float> img(3 * 32 * 32);
  int64_t label = -1;
  ds->get(0, img.data(), &label);
  CHECK(img[0] == doctest::Approx((0.f - kFashionMnistMean) / kFashionMnistStd));  // pixel (0, 0) is 0
  spec.normalize = false;
  spec.image_size = 0;
  spec.channels = 0;
  CHECK(make_dataset(spec, Split::train)->sample_shape() == Shape{1, 28, 28});

  DatasetSpec syn;
  syn.name = "synthetic";
  syn.synthetic_size = 600;
  syn.image_size = 16;
  syn.channels = 3;
  syn.num_classes = 7;
  auto train = make_dataset(syn, Split::train), test = make_dataset(syn, Split::test);
  CHECK(train->size() == 600);
  CHECK(test->size() == 100);
  CHECK(train->sample_shape() == Shape{3, 16, 16});
  CHECK(train->num_classes() == 7);
  std::vector<float> a(3 * 16 * 16), b(a.size());
  int64_t la = 0, lb = 0;
  train->get(3, a.data(), &la);
  test->get(3, b.data(), &lb);
  CHECK(la == lb);  // same class...
  CHECK(a != b);    // ...other noise

  DatasetSpec bad;
  bad.name = "cifar10";
  std::string msg;
  try {
    make_dataset(bad, Split::train);
  } catch (const dpx::UsageError& e) {
    msg = e.what();
  }
  CHECK(contains(msg, "unknown data set 'cifar10': use fashion-mnist, mnist, synthetic, imagefolder or tinyimagenet"));
}

TEST_CASE("fashion-mnist: the real data set from the Debian package") {
  std::string dir = fashion_mnist_dir("");
  if (!fs::exists(fs::path(dir) / "train-labels-idx1-ubyte.gz") && !fs::exists(fs::path(dir) / "train-labels-idx1-ubyte")) {
    MESSAGE("skipped: Fashion-MNIST not found in '", dir, "' (apt-get install dataset-fashion-mnist)");
    return;
  }
  auto train = load_fashion_mnist("", Split::train);
  auto test = load_fashion_mnist("", Split::test);
  CHECK(train->size() == 60000);
  CHECK(test->size() == 10000);
  CHECK(train->sample_shape() == Shape{1, 28, 28});
  CHECK(test->sample_shape() == Shape{1, 28, 28});
  CHECK(train->num_classes() == 10);
  // The files' first labels (9 = ankle boot) and the balanced classes: 6000 / 1000 per class.
  const std::vector<int64_t> first_train = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5}, first_test = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
  for (int i = 0; i < 10; ++i) {
    CHECK(train->labels().data<int64_t>()[i] == first_train[i]);
    CHECK(test->labels().data<int64_t>()[i] == first_test[i]);
  }
  std::vector<int64_t> per_class(10, 0);
  for (int64_t i = 0; i < train->size(); ++i) ++per_class[train->labels().data<int64_t>()[i]];
  CHECK(per_class == std::vector<int64_t>(10, 6000));
  // The documented normalisation constants are this training set's pixel mean and std.
  const Tensor& px = train->images();
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < px.numel(); ++i) {
    double v = px.data<uint8_t>()[i] / 255.0;
    sum += v;
    sum_sq += v * v;
  }
  double mean = sum / static_cast<double>(px.numel());
  double stddev = std::sqrt(sum_sq / static_cast<double>(px.numel()) - mean * mean);
  CHECK(mean == doctest::Approx(kFashionMnistMean).epsilon(2e-4));
  CHECK(stddev == doctest::Approx(kFashionMnistStd).epsilon(2e-4));
}
