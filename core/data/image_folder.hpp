// Image data sets kept as folders of files: the index of their images and classes, in
// torchvision's order. Two layouts: torchvision's ImageFolder (one sub-folder per class, classes
// sorted, files sorted within a class, sub-folders walked as os.walk(followlinks=True) and sorted;
// splits in train/ and val/ or test/ when there is a train/) and TinyImageNet-200's own
// (wnids.txt, train/<wnid>/images/, val/images/ with val/val_annotations.txt). Indexing reads
// directories only: no file is opened or stat'ed where the directory entry gives its type.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/dataset.hpp"

namespace dpx::data {

enum class FolderLayout { imagefolder, tinyimagenet };

// The files of one split, each with its class. Names are kept in one buffer (a million paths in
// about 60 MB, not a million strings).
class FolderIndex {
 public:
  std::string root;                  // the split's folder; paths are relative to it
  std::vector<std::string> classes;  // class names (folder names, wnids), sorted; label = position
  std::string describe_source;       // "imagefolder DIR/train" for messages

  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  std::string_view relative_path(int64_t i) const;
  std::string path(int64_t i) const;
  int64_t label(int64_t i) const { return labels_[static_cast<size_t>(i)]; }
  // Images per class, in class order.
  std::vector<int64_t> class_counts() const;
  void add(std::string_view relative_path, int64_t label);
  void reserve(size_t files, size_t name_bytes);

 private:
  std::string names_;
  std::vector<uint64_t> ends_;  // names_[ends_[i-1], ends_[i]) is file i's relative path
  std::vector<int32_t> labels_;
};

// torchvision's IMG_EXTENSIONS (torchvision/datasets/folder.py), compared case-insensitively: the
// files ImageFolder takes. dpx decodes JPEG and PNG; a file of another format in the index is a bad
// image (its error names it; --on-bad-image skip skips it).
bool has_image_extension(std::string_view filename);

// The split folders of an imagefolder data set: DIR/train and DIR/val (or DIR/test) when DIR has a
// train/ folder; else DIR itself is the training split and there is no test split ("").
struct SplitFolders {
  std::string train, test;
};
SplitFolders imagefolder_splits(const std::string& dir);

// Indexes one split. Throws dpx::Error naming `dir` for a missing or unreadable folder, no class
// folders, a class folder with no image, or (tinyimagenet) a file missing from or unknown to
// wnids.txt / val_annotations.txt. `flag` names the option in messages ("--data-dir").
FolderIndex index_imagefolder(const std::string& split_dir, const std::string& flag = "--data-dir");
FolderIndex index_tinyimagenet(const std::string& dir, Split split, const std::string& flag = "--data-dir");
FolderIndex index_folder(FolderLayout layout, const std::string& dir, Split split, const std::string& flag = "--data-dir");

// The class folders of an imagefolder split, sorted (what index_imagefolder takes as classes).
std::vector<std::string> class_folders(const std::string& split_dir, const std::string& flag = "--data-dir");

// Throws UsageError naming both folders unless the training and test splits have the same classes
// in the same order (labels would mean different classes).
void check_same_classes(const std::vector<std::string>& train, const std::string& train_dir,
                        const std::vector<std::string>& test, const std::string& test_dir);

// A file's bytes, for the decoder: refuses what is not a regular file (a FIFO would block), an
// unreadable file and one larger than `max_bytes`, with BadImage naming it.
inline constexpr uint64_t kMaxImageFileBytes = uint64_t{256} << 20;
void read_image_file(const std::string& path, std::vector<uint8_t>& bytes, uint64_t max_bytes = kMaxImageFileBytes);

}  // namespace dpx::data
