// Folder indexing for image data sets (image_folder.hpp): readdir with the entry's type, a stat
// only for links and file systems that do not give the type, and torchvision's sort order.
#include "core/data/image_folder.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "core/data/image_decode.hpp"
#include "core/input_files.hpp"

namespace dpx::data {

// ---- FolderIndex -----------------------------------------------------------------------------

std::string_view FolderIndex::relative_path(int64_t i) const {
  const size_t begin = i == 0 ? 0 : ends_[static_cast<size_t>(i - 1)];
  return std::string_view(names_).substr(begin, ends_[static_cast<size_t>(i)] - begin);
}

std::string FolderIndex::path(int64_t i) const {
  std::string p = root;
  p += '/';
  p += relative_path(i);
  return p;
}

std::vector<int64_t> FolderIndex::class_counts() const {
  std::vector<int64_t> counts(classes.size(), 0);
  for (int32_t l : labels_) ++counts[static_cast<size_t>(l)];
  return counts;
}

void FolderIndex::add(std::string_view relative_path, int64_t label) {
  names_.append(relative_path);
  ends_.push_back(names_.size());
  labels_.push_back(static_cast<int32_t>(label));
}

void FolderIndex::reserve(size_t files, size_t name_bytes) {
  names_.reserve(name_bytes);
  ends_.reserve(files);
  labels_.reserve(files);
}

bool has_image_extension(std::string_view filename) {
  static const char* const kExtensions[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
  for (const char* ext : kExtensions) {
    const size_t n = std::strlen(ext);
    if (filename.size() < n) continue;
    bool same = true;
    for (size_t k = 0; k < n && same; ++k) {
      const char c = filename[filename.size() - n + k];
      same = (c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) == ext[k];
    }
    if (same) return true;
  }
  return false;
}

namespace {

const char* kExtensionList = ".jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp, any case";

struct Entry {
  std::string name;
  bool is_dir = false;
};

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The entries of a folder but "." and "..": directories (links to directories followed, as
// os.walk(followlinks=True) and os.scandir's is_dir()) and everything else.
std::vector<Entry> list_folder(const std::string& dir, const std::string& flag) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) usage_fail(flag, ": cannot read the folder '", dir, "': ", std::strerror(errno));
  std::vector<Entry> out;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    Entry entry;
    entry.name = e->d_name;
    if (e->d_type == DT_DIR)
      entry.is_dir = true;
    else if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN)
      entry.is_dir = is_directory(dir + "/" + entry.name);
    out.push_back(std::move(entry));
    errno = 0;
  }
  const int err = errno;
  ::closedir(d);
  if (err) usage_fail(flag, ": cannot read the folder '", dir, "': ", std::strerror(err));
  return out;
}

std::pair<dev_t, ino_t> identity(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

// Every image file under `root`/`rel`, as torchvision's make_dataset lists them: the folders of
// the walk sorted by path, the files sorted by name within each. A folder reached twice (a link
// loop) is walked once.
void walk(const std::string& root, const std::string& rel, int depth, std::set<std::pair<dev_t, ino_t>>& seen,
          std::vector<std::pair<std::string, std::vector<std::string>>>& folders, const std::string& flag) {
  const std::string dir = rel.empty() ? root : root + "/" + rel;
  if (depth > 64 || !seen.insert(identity(dir)).second) return;
  std::vector<std::string> files;
  std::vector<std::string> subfolders;
  for (Entry& e : list_folder(dir, flag)) {
    if (e.is_dir)
      subfolders.push_back(std::move(e.name));
    else if (has_image_extension(e.name))
      files.push_back(std::move(e.name));
  }
  std::sort(files.begin(), files.end());
  folders.emplace_back(rel, std::move(files));
  for (const std::string& s : subfolders) walk(root, rel.empty() ? s : rel + "/" + s, depth + 1, seen, folders, flag);
}

void require_folder(const std::string& dir, const std::string& flag, const char* what) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    usage_fail(flag, " ", dir, ": ", what, " not found (", std::strerror(errno), ")");
  if (!S_ISDIR(st.st_mode)) usage_fail(flag, " ", dir, ": ", what, " is not a folder");
}

std::string read_small_text(const std::string& path, const std::string& flag) {
  check_input_file(path, flag, 64 * kMiB);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  if (!in && !in.eof()) usage_fail(flag, ": cannot read '", path, "'");
  return s.str();
}

}  // namespace

SplitFolders imagefolder_splits(const std::string& dir) {
  SplitFolders s;
  if (is_directory(dir + "/train")) {
    s.train = dir + "/train";
    if (is_directory(dir + "/val"))
      s.test = dir + "/val";
    else if (is_directory(dir + "/test"))
      s.test = dir + "/test";
  } else {
    s.train = dir;
  }
  return s;
}

std::vector<std::string> class_folders(const std::string& split_dir, const std::string& flag) {
  require_folder(split_dir, flag, "the image folder");
  std::vector<std::string> classes;
  for (Entry& e : list_folder(split_dir, flag))
    if (e.is_dir) classes.push_back(std::move(e.name));
  std::sort(classes.begin(), classes.end());
  return classes;
}

FolderIndex index_imagefolder(const std::string& split_dir, const std::string& flag) {
  FolderIndex index;
  index.root = split_dir;
  index.describe_source = "imagefolder " + split_dir;
  index.classes = class_folders(split_dir, flag);
  if (index.classes.empty())
    usage_fail(flag, " ", split_dir, ": no class folders in it: an image folder holds one sub-folder of images per "
               "class (torchvision's ImageFolder layout), optionally under train/ and val/");
  std::vector<std::string> empty;
  for (size_t c = 0; c < index.classes.size(); ++c) {
    std::set<std::pair<dev_t, ino_t>> seen;
    std::vector<std::pair<std::string, std::vector<std::string>>> folders;
    walk(split_dir, index.classes[c], 0, seen, folders, flag);
    std::sort(folders.begin(), folders.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const int64_t before = index.size();
    for (const auto& [rel, files] : folders)
      for (const std::string& f : files) index.add(rel + "/" + f, static_cast<int64_t>(c));
    if (index.size() == before) empty.push_back(index.classes[c]);
  }
  if (!empty.empty()) {
    std::string list;
    for (size_t k = 0; k < empty.size() && k < 5; ++k) list += (k ? ", '" : "'") + excerpt(empty[k]) + "'";
    if (empty.size() > 5) list += " and " + std::to_string(empty.size() - 5) + " more";
    usage_fail(flag, " ", split_dir, ": ", empty.size(), " class folder(s) hold no image file (", kExtensionList,
               "): ", list, "; add images or remove the folder(s)");
  }
  return index;
}

FolderIndex index_tinyimagenet(const std::string& dir, Split split, const std::string& flag) {
  require_folder(dir, flag, "the TinyImageNet folder");
  // Classes: the wnids of wnids.txt, sorted (the order ImageFolder gives train/'s class folders).
  std::vector<std::string> wnids;
  {
    std::istringstream in(read_small_text(dir + "/wnids.txt", flag + " (TinyImageNet's wnids.txt)"));
    for (std::string line; std::getline(in, line);) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
      if (!line.empty()) wnids.push_back(line);
    }
  }
  if (wnids.empty()) usage_fail(flag, " ", dir, "/wnids.txt names no class: it should list TinyImageNet's 200 wnids");
  std::sort(wnids.begin(), wnids.end());
  if (std::adjacent_find(wnids.begin(), wnids.end()) != wnids.end())
    usage_fail(flag, " ", dir, "/wnids.txt names a class twice: '", excerpt(*std::adjacent_find(wnids.begin(), wnids.end())), "'");
  std::map<std::string, int64_t> label_of;
  for (size_t c = 0; c < wnids.size(); ++c) label_of[wnids[c]] = static_cast<int64_t>(c);

  FolderIndex index;
  index.classes = wnids;
  if (split == Split::train) {
    index.root = dir + "/train";
    index.describe_source = "tinyimagenet " + index.root;
    require_folder(index.root, flag, "TinyImageNet's train/ folder");
    for (const Entry& e : list_folder(index.root, flag))
      if (e.is_dir && !label_of.count(e.name))
        usage_fail(flag, " ", index.root, ": the class folder '", excerpt(e.name),
                   "' is not in wnids.txt: remove it, or add its wnid to wnids.txt");
    for (size_t c = 0; c < wnids.size(); ++c) {
      const std::string images = index.root + "/" + wnids[c] + "/images";
      require_folder(images, flag, ("the images of class " + wnids[c]).c_str());
      std::vector<std::string> files;
      for (Entry& e : list_folder(images, flag))
        if (!e.is_dir && has_image_extension(e.name)) files.push_back(std::move(e.name));
      if (files.empty())
        usage_fail(flag, " ", images, ": class ", wnids[c], " holds no image file (", kExtensionList, ")");
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) index.add(wnids[c] + "/images/" + f, static_cast<int64_t>(c));
    }
    return index;
  }
  // val/: the images of val/images/, each labelled by val_annotations.txt ("FILE<tab>WNID<tab>box").
  index.root = dir + "/val";
  index.describe_source = "tinyimagenet " + index.root;
  require_folder(index.root + "/images", flag, "TinyImageNet's val/images/ folder");
  std::map<std::string, int64_t> annotated;
  {
    const std::string file = index.root + "/val_annotations.txt";
    std::istringstream in(read_small_text(file, flag + " (TinyImageNet's val_annotations.txt)"));
    int64_t line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      const size_t tab = line.find('\t');
      const size_t tab2 = tab == std::string::npos ? std::string::npos : line.find('\t', tab + 1);
      if (tab == std::string::npos || tab == 0)
        usage_fail(flag, " ", file, " line ", line_no, ": expected FILE<tab>WNID<tab>..., got '", excerpt(line), "'");
      const std::string name = line.substr(0, tab), wnid = line.substr(tab + 1, tab2 == std::string::npos ? std::string::npos : tab2 - tab - 1);
      auto it = label_of.find(wnid);
      if (it == label_of.end())
        usage_fail(flag, " ", file, " line ", line_no, ": class '", excerpt(wnid), "' is not in wnids.txt");
      if (!annotated.emplace(name, it->second).second)
        usage_fail(flag, " ", file, " line ", line_no, ": '", excerpt(name), "' is annotated twice");
    }
  }
  std::vector<std::pair<int64_t, std::string>> files;
  for (Entry& e : list_folder(index.root + "/images", flag)) {
    if (e.is_dir || !has_image_extension(e.name)) continue;
    auto it = annotated.find(e.name);
    if (it == annotated.end())
      usage_fail(flag, " ", index.root, "/images/", excerpt(e.name),
                 " has no line in val_annotations.txt: add one (FILE<tab>WNID) or remove the file");
    files.emplace_back(it->second, std::move(e.name));
    annotated.erase(it);
  }
  if (!annotated.empty())
    usage_fail(flag, " ", index.root, "/val_annotations.txt names ", annotated.size(), " file(s) missing from val/images/, "
               "the first '", excerpt(annotated.begin()->first), "'");
  std::sort(files.begin(), files.end());
  std::vector<bool> has(wnids.size(), false);
  for (const auto& [label, name] : files) {
    index.add("images/" + name, label);
    has[static_cast<size_t>(label)] = true;
  }
  for (size_t c = 0; c < wnids.size(); ++c)
    if (!has[c]) usage_fail(flag, " ", index.root, ": class ", wnids[c], " has no validation image");
  return index;
}

FolderIndex index_folder(FolderLayout layout, const std::string& dir, Split split, const std::string& flag) {
  if (layout == FolderLayout::tinyimagenet) return index_tinyimagenet(dir, split, flag);
  require_folder(dir, flag, "the image folder");
  const SplitFolders s = imagefolder_splits(dir);
  if (split == Split::train) return index_imagefolder(s.train, flag);
  if (s.test.empty())
    usage_fail(flag, " ", dir, ": no test split: give the folder train/ and val/ (or test/) sub-folders of class "
               "folders, or pass --no-eval to train without evaluating");
  return index_imagefolder(s.test, flag);
}

void check_same_classes(const std::vector<std::string>& train, const std::string& train_dir,
                        const std::vector<std::string>& test, const std::string& test_dir) {
  if (train == test) return;
  const std::set<std::string> a(train.begin(), train.end()), b(test.begin(), test.end());
  std::string detail;
  for (const std::string& c : a)
    if (!b.count(c)) {
      detail = "'" + excerpt(c) + "' is in " + train_dir + " but not in " + test_dir;
      break;
    }
  if (detail.empty())
    for (const std::string& c : b)
      if (!a.count(c)) {
        detail = "'" + excerpt(c) + "' is in " + test_dir + " but not in " + train_dir;
        break;
      }
  usage_fail("--data-dir: the training split has ", train.size(), " classes and the test split ", test.size(),
             ", not the same ones (", detail, "): labels would mean different classes; give both splits the same "
             "class folders");
}

void read_image_file(const std::string& path, std::vector<uint8_t>& bytes, uint64_t max_bytes) {
  const int fd = open_regular_file(path);
  if (fd < 0) {
    const int err = errno;
    throw BadImage(path + ": " + (err == ENODEV ? "not a regular file (a FIFO, device or socket)" : std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw BadImage(detail::concat(path, ": ", static_cast<uint64_t>(st.st_size), " bytes, more than the ", max_bytes,
                                  " dpx reads of one image"));
  }
  bytes.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw BadImage(path + ": " + (n == 0 ? std::string("shorter than its size (changed while read)") : std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace dpx::data
