// Image folders: the imagefolder and tinyimagenet layouts indexed in torchvision's order, their
// errors, the data set's tensors against torchvision's ImageFolder (fixture), and the loader over
// images: the same batches for any number of workers, epochs that differ, and bad files stopping
// the run with their name or skipped and counted.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/data/datasets.hpp"
#include "core/data/image_dataset.hpp"
#include "core/data/image_decode.hpp"
#include "core/data/image_folder.hpp"
#include "core/data/loader.hpp"
#include "core/safetensors.hpp"
#include "tests/common/errors.hpp"
#include "tests/common/files.hpp"

using namespace dpx::data;
using dpx::Tensor;
using dpx::testing::contains;
using dpx::testing::error_of;
using dpx::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) { return std::string(DPX_SOURCE_DIR) + "/tests/core/data/images/" + name; }

void touch(const fs::path& p, const std::vector<uint8_t>& bytes = {}) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A small photo-like JPEG or PNG of w x h.
std::vector<uint8_t> image_bytes(int w, int h, int seed, bool png = false) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        rgb[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<uint8_t>((x * (c + 1) * 7 + y * 5 + seed * 31) % 256);
  return png ? encode_png(rgb.data(), w, h, 3) : encode_jpeg(rgb.data(), w, h, 3, 90);
}

std::vector<std::string> paths_of(const FolderIndex& index) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < index.size(); ++i)
    out.push_back(std::string(index.relative_path(i)) + ":" + std::to_string(index.label(i)));
  return out;
}

// A folder of `classes` classes with `per_class` images each under DIR/train and 2 under DIR/val.
void make_folder(const fs::path& dir, int classes, int per_class) {
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i)
      touch(dir / "train" / ("class" + std::to_string(c)) / ("img" + std::to_string(i) + (i % 3 == 2 ? ".png" : ".jpg")),
            image_bytes(40 + 7 * i, 30 + 5 * c, c * 100 + i, i % 3 == 2));
    for (int i = 0; i < 2; ++i)
      touch(dir / "val" / ("class" + std::to_string(c)) / ("v" + std::to_string(i) + ".jpg"), image_bytes(33, 41, 1000 + c * 10 + i));
  }
}

std::vector<std::vector<float>> epoch_images(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<std::vector<float>> out;
  while (auto b = loader.next()) out.push_back(b->images.to_vector());
  return out;
}

}  // namespace

TEST_CASE("imagefolder: classes and files in torchvision's order, sub-folders walked, other files ignored") {
  TempDir dir("imagefolder_order");
  const fs::path root = dir.path;
  // Expected order checked against torchvision 0.14's make_dataset on the same tree.
  for (const char* f : {"a_class/1.jpg", "a_class/10.jpg", "a_class/2.jpg", "a_class/B.jpg", "b_class/z.jpg",
                        "b_class/a.PNG", "b_class/readme.txt", "b_class/sub/c.jpg", "b_class/sub2/x.jpeg",
                        "b_class/sub.x/y.webp"})
    touch(root / f);
  fs::create_directory_symlink(".", root / "a_class" / "loop");  // a link loop is walked once
  const FolderIndex index = index_imagefolder(root.string());
  CHECK(index.classes == std::vector<std::string>{"a_class", "b_class"});
  CHECK(paths_of(index) == std::vector<std::string>{"a_class/1.jpg:0", "a_class/10.jpg:0", "a_class/2.jpg:0",
                                                    "a_class/B.jpg:0", "b_class/a.PNG:1", "b_class/z.jpg:1",
                                                    "b_class/sub/c.jpg:1", "b_class/sub.x/y.webp:1",
                                                    "b_class/sub2/x.jpeg:1"});
  CHECK(index.class_counts() == std::vector<int64_t>{4, 5});
  CHECK(index.path(0) == root.string() + "/a_class/1.jpg");
  CHECK(has_image_extension("X.JpEg"));
  CHECK_FALSE(has_image_extension("x.gif"));
}

TEST_CASE("imagefolder: splits, and the errors of an empty or missing folder, an empty class, unlike splits") {
  TempDir dir("imagefolder_errors");
  const fs::path root = dir.path;
  CHECK(contains(error_of([&] { index_imagefolder((root / "nope").string()); }), "--data-dir " + (root / "nope").string() + ": the image folder not found"));
  CHECK(contains(error_of([&] { index_imagefolder(root.string()); }), "no class folders in it"));
  fs::create_directories(root / "empty_class");
  touch(root / "full" / "x.jpg");
  touch(root / "empty_class" / "notes.txt");
  CHECK(contains(error_of([&] { index_imagefolder(root.string()); }), "1 class folder(s) hold no image file"));
  CHECK(contains(error_of([&] { index_imagefolder(root.string()); }), "'empty_class'"));
  // Without train/, the folder is the training split and there is no test split.
  fs::remove_all(root / "empty_class");
  CHECK(imagefolder_splits(root.string()).train == root.string());
  CHECK(contains(error_of([&] { index_folder(FolderLayout::imagefolder, root.string(), Split::test); }),
                 "no test split: give the folder train/ and val/ (or test/)"));
  // With train/ and test/ (no val/), test/ is the test split; the classes must be the same.
  touch(root / "split" / "train" / "cat" / "a.jpg");
  touch(root / "split" / "train" / "dog" / "a.jpg");
  touch(root / "split" / "test" / "cat" / "b.jpg");
  touch(root / "split" / "test" / "cow" / "b.jpg");
  const SplitFolders s = imagefolder_splits((root / "split").string());
  CHECK(s.test == (root / "split" / "test").string());
  ImageSetOptions o;
  o.transform.size = 8;
  const std::string msg = error_of([&] { load_image_folder(FolderLayout::imagefolder, (root / "split").string(), Split::test, o, 0); });
  CHECK(contains(msg, "not the same ones ('dog' is in "));
  CHECK(contains(msg, "give both splits the same class folders"));
  CHECK(contains(error_of([&] { load_image_folder(FolderLayout::imagefolder, "", Split::train, o, 0); }),
                 "--dataset imagefolder needs --data-dir DIR"));
}

TEST_CASE("tinyimagenet: wnids.txt, train/<wnid>/images, val/images with val_annotations.txt, and their errors") {
  TempDir dir("tinyimagenet");
  const fs::path root = dir.path;
  auto write = [](const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  };
  write(root / "wnids.txt", "n02\nn01\n");
  for (const char* w : {"n01", "n02"})
    for (int i = 0; i < 3; ++i) touch(root / "train" / w / "images" / (std::string(w) + "_" + std::to_string(i) + ".JPEG"));
  touch(root / "train" / "n01" / "n01_boxes.txt");
  for (int i = 0; i < 4; ++i) touch(root / "val" / "images" / ("val_" + std::to_string(i) + ".JPEG"));
  write(root / "val" / "val_annotations.txt",
        "val_0.JPEG\tn02\t0\t0\t10\t10\nval_1.JPEG\tn01\t1\t1\t5\t5\nval_2.JPEG\tn02\t0\t0\t1\t1\nval_3.JPEG\tn01\t0\t0\t1\t1\n");
  const FolderIndex train = index_tinyimagenet(root.string(), Split::train);
  CHECK(train.classes == std::vector<std::string>{"n01", "n02"});  // sorted, as ImageFolder on train/
  CHECK(train.size() == 6);
  CHECK(paths_of(train).front() == "n01/images/n01_0.JPEG:0");
  const FolderIndex val = index_tinyimagenet(root.string(), Split::test);
  CHECK(paths_of(val) == std::vector<std::string>{"images/val_1.JPEG:0", "images/val_3.JPEG:0", "images/val_0.JPEG:1",
                                                  "images/val_2.JPEG:1"});
  // Errors: an unannotated file, an annotation of a missing file, an unknown class, a stray folder.
  touch(root / "val" / "images" / "val_9.JPEG");
  CHECK(contains(error_of([&] { index_tinyimagenet(root.string(), Split::test); }), "val_9.JPEG has no line in val_annotations.txt"));
  fs::remove(root / "val" / "images" / "val_9.JPEG");
  fs::remove(root / "val" / "images" / "val_3.JPEG");
  CHECK(contains(error_of([&] { index_tinyimagenet(root.string(), Split::test); }), "names 1 file(s) missing from val/images/"));
  write(root / "val" / "val_annotations.txt", "val_0.JPEG\tn99\t0\n");
  CHECK(contains(error_of([&] { index_tinyimagenet(root.string(), Split::test); }), "class 'n99' is not in wnids.txt"));
  fs::create_directories(root / "train" / "n77" / "images");
  CHECK(contains(error_of([&] { index_tinyimagenet(root.string(), Split::train); }), "the class folder 'n77' is not in wnids.txt"));
  fs::remove_all(root / "train" / "n77");
  fs::remove(root / "wnids.txt");
  CHECK(contains(error_of([&] { index_tinyimagenet(root.string(), Split::train); }), "wnids.txt"));
}

TEST_CASE("the val split's tensors equal torchvision's ImageFolder with Resize + CenterCrop (fixture)") {
  const dpx::SafeTensors expected = dpx::read_safetensors(fixture("expected.safetensors"));
  ImageSetOptions o;
  o.transform.size = 16;  // Resize(18) + CenterCrop(16)
  const auto val = load_image_folder(FolderLayout::imagefolder, fixture("folder"), Split::test, o, 0);
  const Tensor& want = *expected.find("folder/val_images");
  const Tensor& labels = *expected.find("folder/val_labels");
  REQUIRE(val->size() == want.size(0));
  std::vector<float> img(3 * 16 * 16);
  for (int64_t i = 0; i < val->size(); ++i) {
    CAPTURE(i);
    int64_t label = -1;
    val->get(i, img.data(), &label);
    CHECK(label == labels.data<int64_t>()[i]);
    const float* w = want.data<float>() + i * 3 * 16 * 16;
    int differ = 0;
    for (size_t k = 0; k < img.size(); ++k) differ += img[k] != w[k];
    CHECK(differ == 0);
  }
  DatasetSpec spec;
  spec.name = "imagefolder";
  spec.dir = fixture("folder");
  spec.image_size = 16;
  CHECK(make_dataset(spec, Split::train)->sample_shape() == dpx::Shape{3, 16, 16});
  spec.image_size = 0;
  CHECK(make_dataset(spec, Split::train)->sample_shape() == dpx::Shape{3, 224, 224});
  spec.channels = 1;
  CHECK(contains(error_of([&] { make_dataset(spec, Split::train); }), "--channels 1: images from folders are RGB"));
}

TEST_CASE("the loader over images: the same batches for 0, 1 and 3 workers, new augmentations each epoch") {
  TempDir dir("image_loader");
  make_folder(dir.path, 3, 5);
  ImageSetOptions o;
  o.transform.size = 12;
  const auto train = load_image_folder(FolderLayout::imagefolder, dir.path.string(), Split::train, o, 5);
  std::vector<std::vector<std::vector<float>>> runs;
  for (int workers : {0, 1, 3}) {
    LoaderOptions lo;
    lo.batch_size = 4;
    lo.seed = 5;
    lo.num_workers = workers;
    DataLoader loader(train, lo);
    runs.push_back(epoch_images(loader, 0));
    CHECK(runs.back() != epoch_images(loader, 1));  // another shuffle and other crops
    CHECK(runs.back() == epoch_images(loader, 0));  // the epoch again: the same bits
    CHECK(loader.stats().images == 3 * 15);  // three epochs of 15 images
    CHECK(loader.stats().busy_s > 0);
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
  // The augmentation depends on the epoch, not only the order: sample 0 of epoch 0 and epoch 1.
  std::vector<float> a(3 * 12 * 12), b(a.size());
  int64_t label = 0;
  train->fetch(0, 0, a.data(), &label);
  train->fetch(0, 1, b.data(), &label);
  CHECK(a != b);
  train->fetch(0, 0, b.data(), &label);
  CHECK(a == b);
}

TEST_CASE("bad images: stop names the file and the way out; skip leaves them out of their batch and counts them") {
  TempDir dir("image_bad");
  make_folder(dir.path, 2, 5);
  const fs::path bad = dir.path / "train" / "class1" / "img1.jpg";
  touch(bad, {0xFF, 0xD8, 0xFF, 0xE0, 0x00});  // a truncated JPEG header
  touch(dir.path / "train" / "class0" / "img9.jpg");  // zero bytes
  ImageSetOptions o;
  o.transform.size = 8;
  LoaderOptions lo;
  lo.batch_size = 10;
  lo.shuffle = false;
  lo.num_workers = 2;
  {
    const auto train = load_image_folder(FolderLayout::imagefolder, dir.path.string(), Split::train, o, 0);
    DataLoader loader(train, lo);
    loader.start_epoch(0);
    const std::string msg = error_of([&] { loader.next(); });
    CHECK(contains(msg, "img9.jpg: empty file (0 bytes)"));
    CHECK(contains(msg, "pass --on-bad-image skip"));
  }
  o.on_bad_image = BadImagePolicy::skip;
  const auto train = load_image_folder(FolderLayout::imagefolder, dir.path.string(), Split::train, o, 0);
  DataLoader loader(train, lo);
  loader.start_epoch(0);
  auto batch = loader.next();
  REQUIRE(batch.has_value());
  CHECK(batch->images.size(0) == 8);  // 10 less the two bad ones
  CHECK(batch->labels.size(0) == 8);
  CHECK(batch->skipped == 2);
  CHECK(train->skipped() == 2);
  CHECK(loader.stats().skipped == 2);
  CHECK(parse_bad_image_policy("skip") == BadImagePolicy::skip);
  CHECK(contains(error_of([] { parse_bad_image_policy("ignore"); }), "--on-bad-image 'ignore'"));
  // A batch of nothing but bad files is an error even when skipping.
  LoaderOptions one = lo;
  one.batch_size = 1;
  DataLoader single(train, one);
  single.start_epoch(0);
  int failed = 0;
  for (int64_t s = 0; s < single.steps_per_epoch(); ++s) {
    try {
      single.next();
    } catch (const dpx::Error& e) {
      CHECK(contains(e.what(), "was skipped as unreadable"));
      ++failed;
    }
  }
  CHECK(failed == 2);  // the two steps of one bad file each; the others go on
}
