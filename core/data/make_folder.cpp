// dpx data make-imagefolder (folder_tools.hpp): photo-like images drawn from counter-based random
// numbers, encoded by TurboJPEG or libspng on every core, written into a staging folder that is
// renamed into place at the end.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/clock.hpp"
#include "core/data/folder_tools.hpp"
#include "core/rng.hpp"

namespace dpx::data {

namespace fs = std::filesystem;

void MakeFolderOptions::validate() const {
  if (classes < 1 || classes > 100000) usage_fail("--classes ", classes, ": give between 1 and 100000 classes");
  if (per_class < 1 || per_class > 10'000'000) usage_fail("--per-class ", per_class, ": give at least 1 image per class");
  if (val_per_class < -1 || val_per_class > 10'000'000)
    usage_fail("--val-per-class ", val_per_class, ": give 0 or more images per class");
  if (width < 8 || height < 8 || width > 8192 || height > 8192)
    usage_fail("--size ", width, "x", height, ": give WxH with each side between 8 and 8192 pixels");
  if (quality < 1 || quality > 100) usage_fail("--quality ", quality, ": give a JPEG quality from 1 to 100");
  if (threads < 0) usage_fail("--threads ", threads, ": give 0 (every core) or more");
}

namespace {

constexpr uint64_t kMakeStream = 0x4D414B45464F4C44ull;  // "MAKEFOLD"

std::string class_name(int c) {
  char b[16];
  std::snprintf(b, sizeof b, "c%04d", c);
  return b;
}

// What one image is: where it goes and how it is drawn and encoded.
struct ImageJob {
  std::string split;  // "train" or "val"
  int cls = 0;
  int64_t index = 0;  // within its class and split
};

enum class Kind { rgb, grey, palette, cmyk };

struct Drawn {
  int w = 0, h = 0;
  std::vector<uint8_t> rgb;  // (h, w, 3)
  Kind kind = Kind::rgb;
};

inline uint8_t clamp8(float v) { return static_cast<uint8_t>(std::lround(std::clamp(v, 0.f, 255.f))); }

// A photo-like image: a smooth background interpolated from a 5 x 5 grid of colours near the
// class's own, a class-specific striped texture, 3-8 sharp-edged rectangles and ellipses, noise.
Drawn draw(const MakeFolderOptions& o, const ImageJob& job) {
  Rng rng = Rng(o.seed, kMakeStream).fork(job.split == "train" ? 0 : 1).fork(static_cast<uint64_t>(job.cls))
                .fork(static_cast<uint64_t>(job.index));
  const Rng look = Rng(o.seed, kMakeStream).fork(2).fork(static_cast<uint64_t>(job.cls));
  Drawn d;
  const double area = static_cast<double>(o.width) * o.height * (0.6 + 0.8 * rng.uniform());
  double aspect = static_cast<double>(o.width) / o.height * std::exp(0.3 * (2 * rng.uniform() - 1));
  if (rng.uniform() < 0.2) aspect = 1 / aspect;
  d.w = std::clamp(static_cast<int>(std::lround(std::sqrt(area * aspect))), 8, 8192);
  d.h = std::clamp(static_cast<int>(std::lround(std::sqrt(area / aspect))), 8, 8192);
  const float u = rng.uniform();
  d.kind = u < 0.04f ? Kind::grey : u < 0.07f ? Kind::palette : (u < 0.08f && o.format == ImageFormat::jpeg) ? Kind::cmyk : Kind::rgb;
  // The class's look: a base colour, a second one, the texture's frequencies.
  float base[3], second[3];
  for (int c = 0; c < 3; ++c) {
    base[c] = 40 + 175 * look.uniform_at(static_cast<uint64_t>(c));
    second[c] = 40 + 175 * look.uniform_at(static_cast<uint64_t>(3 + c));
  }
  const float fx = 1 + 5 * look.uniform_at(6), fy = 1 + 5 * look.uniform_at(7);
  const float phase = 6.2832f * rng.uniform();
  float grid[5][5][3];
  for (auto& row : grid)
    for (auto& cell : row) {
      const float t = rng.uniform();
      for (int c = 0; c < 3; ++c) cell[c] = base[c] * (1 - t) + second[c] * t + 50 * (rng.uniform() - 0.5f);
    }
  d.rgb.resize(static_cast<size_t>(d.w) * d.h * 3);
  for (int y = 0; y < d.h; ++y) {
    const float gy = 4.f * y / std::max(1, d.h - 1);
    const int y0 = std::min(3, static_cast<int>(gy));
    const float ty = gy - y0;
    for (int x = 0; x < d.w; ++x) {
      const float gx = 4.f * x / std::max(1, d.w - 1);
      const int x0 = std::min(3, static_cast<int>(gx));
      const float tx = gx - x0;
      const float stripe = 30.f * std::sin(6.2832f * (fx * x / d.w + fy * y / d.h) + phase);
      uint8_t* p = d.rgb.data() + (static_cast<size_t>(y) * d.w + x) * 3;
      for (int c = 0; c < 3; ++c) {
        const float top = grid[y0][x0][c] * (1 - tx) + grid[y0][x0 + 1][c] * tx;
        const float bottom = grid[y0 + 1][x0][c] * (1 - tx) + grid[y0 + 1][x0 + 1][c] * tx;
        p[c] = clamp8(top * (1 - ty) + bottom * ty + stripe);
      }
    }
  }
  const int shapes = 3 + static_cast<int>(rng.next_u32() % 6);
  for (int s = 0; s < shapes; ++s) {
    const int cx = static_cast<int>(rng.next_u32() % static_cast<uint32_t>(d.w));
    const int cy = static_cast<int>(rng.next_u32() % static_cast<uint32_t>(d.h));
    const int rx = 2 + static_cast<int>(rng.uniform() * d.w / 4), ry = 2 + static_cast<int>(rng.uniform() * d.h / 4);
    const bool ellipse = rng.uniform() < 0.5f;
    uint8_t colour[3];
    for (int c = 0; c < 3; ++c) colour[c] = clamp8(255 * rng.uniform());
    for (int y = std::max(0, cy - ry); y < std::min(d.h, cy + ry); ++y)
      for (int x = std::max(0, cx - rx); x < std::min(d.w, cx + rx); ++x) {
        if (ellipse) {
          const float ex = static_cast<float>(x - cx) / rx, ey = static_cast<float>(y - cy) / ry;
          if (ex * ex + ey * ey > 1) continue;
        }
        std::memcpy(d.rgb.data() + (static_cast<size_t>(y) * d.w + x) * 3, colour, 3);
      }
  }
  // Noise: the sum of two uniforms per channel (a triangle of +-10 levels), sensor-like.
  const uint64_t base_counter = rng.advance(d.rgb.size() / 2 + 1);
  for (size_t i = 0; i < d.rgb.size(); i += 2) {
    const uint32_t bits = rng.bits_at(base_counter + i / 2);
    for (size_t k = 0; k < 2 && i + k < d.rgb.size(); ++k) {
      const int a = static_cast<int>((bits >> (16 * k)) & 0xFF), b = static_cast<int>((bits >> (16 * k + 8)) & 0xFF);
      d.rgb[i + k] = clamp8(d.rgb[i + k] + (a + b - 255) * (10.f / 255));
    }
  }
  return d;
}

// The bytes of the file and its extension.
std::pair<std::vector<uint8_t>, const char*> encode(const MakeFolderOptions& o, const Drawn& d) {
  const size_t n = static_cast<size_t>(d.w) * d.h;
  if (d.kind == Kind::palette) {  // a 6 x 6 x 6 colour cube, as a GIF-era palette
    std::vector<uint8_t> palette(216 * 3), indices(n);
    for (int i = 0; i < 216; ++i) {
      palette[static_cast<size_t>(3 * i)] = static_cast<uint8_t>(51 * (i / 36));
      palette[static_cast<size_t>(3 * i + 1)] = static_cast<uint8_t>(51 * (i / 6 % 6));
      palette[static_cast<size_t>(3 * i + 2)] = static_cast<uint8_t>(51 * (i % 6));
    }
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = d.rgb.data() + 3 * i;
      indices[i] = static_cast<uint8_t>((p[0] + 25) / 51 * 36 + (p[1] + 25) / 51 * 6 + (p[2] + 25) / 51);
    }
    return {encode_png_palette(indices.data(), d.w, d.h, palette), ".png"};
  }
  if (d.kind == Kind::grey) {
    std::vector<uint8_t> grey(n);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = d.rgb.data() + 3 * i;
      grey[i] = static_cast<uint8_t>((299 * p[0] + 587 * p[1] + 114 * p[2] + 500) / 1000);
    }
    return o.format == ImageFormat::png ? std::make_pair(encode_png(grey.data(), d.w, d.h, 1), ".png")
                                        : std::make_pair(encode_jpeg(grey.data(), d.w, d.h, 1, o.quality), ".jpg");
  }
  if (d.kind == Kind::cmyk) {  // ink = 255 - RGB, no black: converts back to about the RGB
    std::vector<uint8_t> cmyk(n * 4);
    for (size_t i = 0; i < n; ++i) {
      for (int c = 0; c < 3; ++c) cmyk[4 * i + static_cast<size_t>(c)] = static_cast<uint8_t>(255 - d.rgb[3 * i + static_cast<size_t>(c)]);
      cmyk[4 * i + 3] = 0;
    }
    return {encode_jpeg(cmyk.data(), d.w, d.h, 4, o.quality), ".jpg"};
  }
  return o.format == ImageFormat::png ? std::make_pair(encode_png(d.rgb.data(), d.w, d.h, 3), ".png")
                                      : std::make_pair(encode_jpeg(d.rgb.data(), d.w, d.h, 3, o.quality), ".jpg");
}

void write_whole(const std::string& path, const std::vector<uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) fail("cannot create ", path, ": ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot write ", path, ": ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) fail("cannot write ", path, ": ", std::strerror(errno));
}

bool pid_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH); }

// Staging folders ".NAME.dpx-partial.PID" beside DIR whose process is gone, and which carry the
// partial marker: the debris of a killed make-imagefolder.
void remove_stale_staging(const fs::path& parent, const std::string& name) {
  std::error_code ec;
  const std::string prefix = "." + name + ".dpx-partial.";
  for (const auto& e : fs::directory_iterator(parent.empty() ? fs::path(".") : parent, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) != 0 || e.is_symlink() || !e.is_directory()) continue;
    char* end = nullptr;
    const long pid = std::strtol(n.c_str() + prefix.size(), &end, 10);
    if (!end || *end != '\0' || pid_alive(pid) || !fs::is_regular_file(e.path() / ".dpx-partial")) continue;
    fs::remove_all(e.path(), ec);
  }
}

bool made_by_dpx(const fs::path& dir) {
  const fs::path marker = dir / kMadeFolderMarker;
  if (fs::is_symlink(marker) || !fs::is_regular_file(marker) || fs::file_size(marker) > 4096) return false;
  std::FILE* f = std::fopen(marker.c_str(), "rb");
  if (!f) return false;
  char buf[4097] = {};
  const size_t n = std::fread(buf, 1, 4096, f);
  std::fclose(f);
  return std::string(buf, n).find("\"generator\": \"dpx\"") != std::string::npos;
}

}  // namespace

MadeFolder make_image_folder(const std::string& dir, const MakeFolderOptions& o) {
  o.validate();
  if (dir.empty()) usage_fail("dpx data make-imagefolder: name the folder to make (DIR)");
  const fs::path target = fs::path(dir).lexically_normal();
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string name = target.filename().string();
  if (name.empty() || name == "." || name == "..")
    usage_fail("dpx data make-imagefolder ", dir, ": name a new folder, not '", name, "'");
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    usage_fail("dpx data make-imagefolder ", dir, ": the folder ", parent.string(), " it goes in does not exist");
  bool replace = false;
  if (fs::is_symlink(target, ec)) usage_fail("dpx data make-imagefolder ", dir, " is a link: name a new folder");
  if (fs::exists(target, ec)) {
    if (!fs::is_directory(target, ec)) usage_fail("dpx data make-imagefolder ", dir, " exists and is not a folder");
    if (!fs::is_empty(target, ec)) {
      if (!made_by_dpx(target))
        usage_fail("dpx data make-imagefolder ", dir, " exists and was not made by dpx data make-imagefolder (no ",
                   kMadeFolderMarker, "): name a new folder");
      if (!o.force)
        usage_fail("dpx data make-imagefolder ", dir, " exists (made by an earlier make-imagefolder): pass --force to "
                   "replace it, or name a new folder");
      replace = true;
    }
  }
  remove_stale_staging(parent, name);
  const fs::path staging = parent / ("." + name + ".dpx-partial." + std::to_string(::getpid()));
  fs::remove_all(staging, ec);
  fs::create_directory(staging, ec);
  if (ec) fail("cannot create ", staging.string(), ": ", ec.message());
  write_whole((staging / ".dpx-partial").string(), {});

  std::vector<ImageJob> jobs;
  for (const char* split : {"train", "val"}) {
    const int n = std::string(split) == "train" ? o.per_class : o.val_count();
    if (n == 0) continue;
    for (int c = 0; c < o.classes; ++c) {
      fs::create_directories(staging / split / class_name(c), ec);
      if (ec) fail("cannot create ", (staging / split / class_name(c)).string(), ": ", ec.message());
      for (int i = 0; i < n; ++i) jobs.push_back({split, c, i});
    }
  }
  Stopwatch sw;
  MadeFolder made;
  std::mutex mu;
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  auto work = [&] {
    MadeFolder mine;
    try {
      for (size_t j; (j = next.fetch_add(1)) < jobs.size();) {
        const ImageJob& job = jobs[j];
        const Drawn d = draw(o, job);
        const auto [bytes, ext] = encode(o, d);
        char file[64];
        std::snprintf(file, sizeof file, "%s_%06lld%s", class_name(job.cls).c_str(), static_cast<long long>(job.index), ext);
        write_whole((staging / job.split / class_name(job.cls) / file).string(), bytes);
        mine.images++;
        mine.bytes += static_cast<int64_t>(bytes.size());
        mine.grey += d.kind == Kind::grey;
        mine.palette += d.kind == Kind::palette;
        mine.cmyk += d.kind == Kind::cmyk;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      next = jobs.size();
    }
    std::lock_guard<std::mutex> lock(mu);
    made.images += mine.images;
    made.bytes += mine.bytes;
    made.grey += mine.grey;
    made.palette += mine.palette;
    made.cmyk += mine.cmyk;
  };
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) {
    fs::remove_all(staging, ec);
    std::rethrow_exception(error);
  }
  {
    char marker[512];
    std::snprintf(marker, sizeof marker,
                  "{\"generator\": \"dpx\", \"made_by\": \"dpx data make-imagefolder\", \"classes\": %d, "
                  "\"per_class\": %d, \"val_per_class\": %d, \"size\": \"%dx%d\", \"format\": \"%s\", \"quality\": %d, "
                  "\"seed\": %llu}\n",
                  o.classes, o.per_class, o.val_count(), o.width, o.height, o.format == ImageFormat::jpeg ? "jpeg" : "png",
                  o.quality, static_cast<unsigned long long>(o.seed));
    const std::string text = marker;
    write_whole((staging / kMadeFolderMarker).string(), std::vector<uint8_t>(text.begin(), text.end()));
  }
  if (replace) {  // the old set moves aside, the new one in, then the old one goes
    const fs::path old = parent / ("." + name + ".dpx-old." + std::to_string(::getpid()));
    fs::rename(target, old, ec);
    if (ec) fail("cannot move the old ", dir, " aside: ", ec.message());
    fs::rename(staging, target, ec);
    if (ec) fail("cannot rename ", staging.string(), " to ", dir, ": ", ec.message());
    fs::remove_all(old, ec);
  } else {
    if (fs::exists(target)) fs::remove(target, ec);  // the empty folder
    fs::rename(staging, target, ec);
    if (ec) fail("cannot rename ", staging.string(), " to ", dir, ": ", ec.message());
  }
  fs::remove(target / ".dpx-partial", ec);  // after the rename: a staging folder always has it
  made.seconds = sw.elapsed_s();
  return made;
}

}  // namespace dpx::data
