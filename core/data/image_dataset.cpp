// ImageFolderDataset (image_dataset.hpp): a file read per sample into a buffer the worker thread
// keeps, transform_image, and the bad-file policy.
#include "core/data/image_dataset.hpp"

#include <cstdio>
#include <vector>

namespace dpx::data {

namespace {
// The augmentation's own Philox stream: its draws never coincide with the shuffle's or the
// weights' from the same seed.
constexpr uint64_t kAugmentStream = 0x4155474D454E54ull;  // "AUGMENT"
// Bad files named one by one on stderr before the rest are only counted.
constexpr size_t kMaxWarnings = 10;
}  // namespace

BadImagePolicy parse_bad_image_policy(const std::string& s) {
  if (s == "stop") return BadImagePolicy::stop;
  if (s == "skip") return BadImagePolicy::skip;
  usage_fail("--on-bad-image '", excerpt(s), "': use stop (an unreadable image ends the run, naming it) or skip "
             "(it is left out of its batch and counted)");
}

std::string bad_image_policy_name(BadImagePolicy p) { return p == BadImagePolicy::stop ? "stop" : "skip"; }

ImageFolderDataset::ImageFolderDataset(FolderIndex index, ImageTransformOptions transform, BadImagePolicy on_bad_image,
                                       uint64_t seed, std::string name)
    : index_(std::move(index)),
      transform_(transform),
      normalize_(transform.mean, transform.std),
      on_bad_image_(on_bad_image),
      seed_(seed),
      name_(std::move(name)) {
  transform_.validate();
}

void ImageFolderDataset::load(int64_t i, int64_t epoch, float* image_chw) const {
  thread_local std::vector<uint8_t> bytes;
  const std::string path = index_.path(i);
  read_image_file(path, bytes);
  Rng rng = Rng(seed_, kAugmentStream).fork(static_cast<uint64_t>(epoch)).fork(static_cast<uint64_t>(i));
  transform_image(bytes, path, transform_, normalize_, rng, image_chw);
}

void ImageFolderDataset::get(int64_t i, float* image_chw, int64_t* label) const {
  DPX_CHECK(i >= 0 && i < size(), "sample ", i, " of ", size());
  load(i, 0, image_chw);
  *label = index_.label(i);
}

bool ImageFolderDataset::fetch(int64_t i, int64_t epoch, float* image_chw, int64_t* label) const {
  DPX_CHECK(i >= 0 && i < size(), "sample ", i, " of ", size());
  try {
    load(i, epoch, image_chw);
  } catch (const BadImage& e) {
    if (on_bad_image_ == BadImagePolicy::stop)
      throw BadImage(std::string(e.what()) +
                     ". Replace or remove the file (dpx data check lists every bad file), or pass --on-bad-image skip");
    skipped_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(warned_mu_);
    if (warned_.size() < kMaxWarnings && warned_.insert(i).second)
      std::fprintf(stderr, "dpx: warning: skipped %s (--on-bad-image skip)%s\n", e.what(),
                   warned_.size() == kMaxWarnings ? "; further bad files are only counted" : "");
    return false;
  }
  *label = index_.label(i);
  return true;
}

std::string ImageFolderDataset::describe() const {
  return describe_dataset(name_ + " (" + index_.root + ", " + (transform_.train ? "RandomResizedCrop" : "CenterCrop") + ")",
                          *this);
}

std::shared_ptr<const ImageFolderDataset> load_image_folder(FolderLayout layout, const std::string& dir, Split split,
                                                            const ImageSetOptions& options, uint64_t seed) {
  if (dir.empty())
    usage_fail("--dataset ", layout == FolderLayout::tinyimagenet ? "tinyimagenet" : "imagefolder",
               " needs --data-dir DIR: the folder of the data set (dpx data make-imagefolder DIR makes one)");
  FolderIndex index = index_folder(layout, dir, split, "--data-dir");
  if (layout == FolderLayout::imagefolder && split == Split::test) {
    const SplitFolders s = imagefolder_splits(dir);
    check_same_classes(class_folders(s.train), s.train, index.classes, s.test);
  }
  ImageTransformOptions t = options.transform;
  t.train = split == Split::train;
  const std::string name = std::string(layout == FolderLayout::tinyimagenet ? "tinyimagenet " : "imagefolder ") +
                           split_name(split);
  return std::make_shared<ImageFolderDataset>(std::move(index), t, options.on_bad_image, seed, name);
}

}  // namespace dpx::data
