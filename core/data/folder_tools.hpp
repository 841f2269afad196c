// What `dpx data` does with image folders: make one (photo-like JPEG or PNG images, so decode costs
// and file sizes are realistic), check one (every file decoded, counts per class, the unreadable
// ones listed), and preview one (the first samples of a split as the model sees them).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/data/image_dataset.hpp"
#include "core/data/image_decode.hpp"
#include "core/data/image_folder.hpp"
#include "core/tensor.hpp"

namespace dpx::data {

// ---- make ------------------------------------------------------------------------------------

struct MakeFolderOptions {
  int classes = 10;
  int per_class = 100;       // training images per class
  int val_per_class = -1;    // validation images per class; -1: max(2, per_class / 10)
  int width = 500, height = 375;  // the mean size (ImageNet's most common); each image varies
  ImageFormat format = ImageFormat::jpeg;
  int quality = 90;          // JPEG quality (PIL's default is 75; 90 is closer to ImageNet's files)
  uint64_t seed = 0;
  int threads = 0;           // 0: every core
  bool force = false;        // replace a folder an earlier make-imagefolder wrote
  void validate() const;     // UsageError naming --classes, --per-class, --val-per-class, --size, --quality
  int val_count() const { return val_per_class >= 0 ? val_per_class : std::max(2, per_class / 10); }
};

struct MadeFolder {
  int64_t images = 0, bytes = 0;
  int64_t grey = 0, palette = 0, cmyk = 0;  // the images of those kinds among them
  double seconds = 0;
};

// The marker file a made folder carries (JSON with "generator": "dpx"): what --force may replace.
inline constexpr const char* kMadeFolderMarker = "dpx-imagefolder.json";

// Writes DIR/train/<class>/ and DIR/val/<class>/ (classes c0000, c0001, ...): each image's size
// varies around width x height (areas 0.6-1.4 times, aspect ratios to 1.35 times either way, a
// fifth in portrait), its content a smooth background, a class-specific texture, sharp-edged
// shapes and noise; about 4 % are grey, 3 % palette PNGs and, for JPEG, 1 % CMYK. The images
// depend only on the options and the seed. Everything is written into a staging folder beside DIR
// and renamed into place at the end, so DIR never holds a partial set; staging folders that a
// killed run left are removed. DIR must not exist, be an empty folder, or (with force) carry the
// marker of an earlier run. Throws UsageError naming DIR otherwise.
MadeFolder make_image_folder(const std::string& dir, const MakeFolderOptions& options);

// ---- check -----------------------------------------------------------------------------------

struct CheckedSplit {
  std::string name, root;
  std::vector<std::string> classes;
  std::vector<int64_t> counts;                            // images per class
  std::vector<std::pair<std::string, std::string>> bad;   // (path, why) of every unreadable file
  std::vector<std::pair<std::string, int64_t>> kinds;     // "JPEG RGB" -> count, sorted by name
  double seconds = 0;
};

struct FolderCheck {
  FolderLayout layout = FolderLayout::imagefolder;
  std::vector<CheckedSplit> splits;
  int64_t bad_files() const;
};

// The layout of DIR: tinyimagenet when it holds wnids.txt, else imagefolder.
FolderLayout detect_layout(const std::string& dir);

// Indexes every split of DIR and decodes every image on `threads` threads (0: every core). Index
// errors (no classes, an empty class, unlike splits) throw UsageError as at training time.
FolderCheck check_image_folder(const std::string& dir, FolderLayout layout, int threads);

// ---- preview ---------------------------------------------------------------------------------

struct Preview {
  Tensor images;  // (N, 3, S, S) f32: the normalised tensors the model is given
  Tensor labels;  // (N) i64
  std::vector<std::string> files;
};

// The first `count` samples of a split in its order (classes sorted, files sorted within a class),
// transformed as training (epoch 0, augmentation from `seed`) or evaluation sees them.
Preview preview_samples(const ImageFolderDataset& set, int count);

// The images de-normalised (x * std + mean) to 8-bit RGB, laid out in a grid of ceil(sqrt(N))
// columns with 2-pixel gaps, as PNG bytes signed "dpx data preview".
std::vector<uint8_t> preview_grid_png(const Preview& p, const ImageTransformOptions& t);

inline constexpr const char* kPreviewSoftware = "dpx data preview";

}  // namespace dpx::data
