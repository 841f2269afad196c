// dpx data check and dpx data preview (folder_tools.hpp): every file of every split decoded on
// all cores; the first samples of a split as tensors and as a grid image.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/clock.hpp"
#include "core/data/folder_tools.hpp"

namespace dpx::data {

namespace fs = std::filesystem;

int64_t FolderCheck::bad_files() const {
  int64_t n = 0;
  for (const CheckedSplit& s : splits) n += static_cast<int64_t>(s.bad.size());
  return n;
}

FolderLayout detect_layout(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "wnids.txt", ec) ? FolderLayout::tinyimagenet : FolderLayout::imagefolder;
}

namespace {

CheckedSplit check_split(const FolderIndex& index, const std::string& name, int threads) {
  CheckedSplit out;
  out.name = name;
  out.root = index.root;
  out.classes = index.classes;
  out.counts = index.class_counts();
  Stopwatch sw;
  std::mutex mu;
  std::map<std::string, int64_t> kinds;
  std::atomic<int64_t> next{0};
  auto work = [&] {
    std::vector<uint8_t> bytes;
    RgbImage image;
    std::map<std::string, int64_t> mine;
    std::vector<std::pair<std::string, std::string>> bad;
    for (int64_t i; (i = next.fetch_add(1)) < index.size();) {
      const std::string path = index.path(i);
      try {
        read_image_file(path, bytes);
        const ImageHeader h = read_image_header(bytes, path);
        decode_rgb(bytes, path, image);  // the whole image: a truncated file fails only here
        mine[std::string(image_format_name(h.format)) + " " + h.color]++;
      } catch (const BadImage& e) {
        const std::string what = e.what();
        bad.emplace_back(path, what.size() > path.size() + 2 ? what.substr(path.size() + 2) : what);
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [k, n] : mine) kinds[k] += n;
    out.bad.insert(out.bad.end(), bad.begin(), bad.end());
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  std::sort(out.bad.begin(), out.bad.end());
  out.kinds.assign(kinds.begin(), kinds.end());
  out.seconds = sw.elapsed_s();
  return out;
}

}  // namespace

FolderCheck check_image_folder(const std::string& dir, FolderLayout layout, int threads) {
  if (threads < 0) usage_fail("--threads ", threads, ": give 0 (every core) or more");
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  FolderCheck check;
  check.layout = layout;
  const FolderIndex train = index_folder(layout, dir, Split::train, "dpx data check");
  std::optional<FolderIndex> test;
  if (layout == FolderLayout::tinyimagenet || !imagefolder_splits(dir).test.empty()) {
    test = index_folder(layout, dir, Split::test, "dpx data check");
    check_same_classes(train.classes, train.root, test->classes, test->root);
  }
  check.splits.push_back(check_split(train, "train", threads));
  if (test) check.splits.push_back(check_split(*test, layout == FolderLayout::tinyimagenet ? "val" : fs::path(test->root).filename().string(), threads));
  return check;
}

Preview preview_samples(const ImageFolderDataset& set, int count) {
  if (count < 1) usage_fail("--count ", count, ": give 1 or more samples");
  const int64_t n = std::min<int64_t>(count, set.size());
  const Shape s = set.sample_shape();
  Preview p;
  p.images = Tensor::empty({n, s[0], s[1], s[2]});
  p.labels = Tensor::empty({n}, DType::i64);
  const int64_t m = shape_numel(s);
  for (int64_t i = 0; i < n; ++i) {
    set.get(i, p.images.data<float>() + i * m, p.labels.data<int64_t>() + i);
    p.files.push_back(set.index().path(i));
  }
  return p;
}

std::vector<uint8_t> preview_grid_png(const Preview& p, const ImageTransformOptions& t) {
  const int64_t n = p.images.size(0), side = p.images.size(2);
  const int64_t cols = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  const int64_t rows = (n + cols - 1) / cols;
  constexpr int64_t gap = 2;
  const int64_t w = cols * side + (cols + 1) * gap, h = rows * side + (rows + 1) * gap;
  std::vector<uint8_t> grid(static_cast<size_t>(w * h * 3), 128);
  const float* x = p.images.data<float>();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t ox = gap + (k % cols) * (side + gap), oy = gap + (k / cols) * (side + gap);
    for (int c = 0; c < 3; ++c)
      for (int64_t y = 0; y < side; ++y)
        for (int64_t xx = 0; xx < side; ++xx) {
          const float v = x[((k * 3 + c) * side + y) * side + xx] * t.std[c] + t.mean[c];
          grid[static_cast<size_t>(((oy + y) * w + ox + xx) * 3 + c)] =
              static_cast<uint8_t>(std::lround(std::clamp(v * 255.f, 0.f, 255.f)));
        }
  }
  return encode_png(grid.data(), static_cast<int>(w), static_cast<int>(h), 3, kPreviewSoftware);
}

}  // namespace dpx::data
