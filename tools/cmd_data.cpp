// `dpx data`: image folders to train and study with. make-imagefolder writes a decodable,
// photo-like data set; check decodes every file and counts images per class; preview shows the
// first samples of a split as the model sees them (a grid PNG, and the exact tensors); bench times
// the training loader alone (read, decode, augment, batch), as a DataLoader loop is timed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/atomic_file.hpp"
#include "core/data/datasets.hpp"
#include "core/data/folder_tools.hpp"
#include "core/data/loader.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"
#include "core/safetensors.hpp"
#include "tools/commands.hpp"
#include "tools/image_flags.hpp"
#include "tools/print.hpp"
#include "tools/train_flags.hpp"

namespace dpx::tools {

namespace {

struct MakeFlags {
  std::string dir, size = "500x375", format = "jpeg";
  data::MakeFolderOptions o;
};

void parse_size(const std::string& text, int& w, int& h) {
  const size_t x = text.find('x');
  char* end = nullptr;
  const long a = x == std::string::npos ? -1 : std::strtol(text.c_str(), &end, 10);
  const bool first_ok = x != std::string::npos && end == text.c_str() + x;
  const long b = first_ok ? std::strtol(text.c_str() + x + 1, &end, 10) : -1;
  if (!first_ok || end != text.c_str() + text.size() || a < 1 || b < 1 || a > 100000 || b > 100000)
    usage_fail("--size '", excerpt(text), "': give WIDTHxHEIGHT in pixels, e.g. 500x375");
  w = static_cast<int>(a);
  h = static_cast<int>(b);
}

void run_make(MakeFlags& f) {
  parse_size(f.size, f.o.width, f.o.height);
  if (f.format == "jpeg" || f.format == "jpg")
    f.o.format = data::ImageFormat::jpeg;
  else if (f.format == "png")
    f.o.format = data::ImageFormat::png;
  else
    usage_fail("--format '", excerpt(f.format), "': use jpeg or png");
  const data::MadeFolder m = data::make_image_folder(f.dir, f.o);
  std::printf("wrote %s: %d classes, %d train and %d val images per class (%lld images: %lld grey, %lld palette PNG, "
              "%lld CMYK), around %dx%d, %.1f MB, in %.1f s\n",
              f.dir.c_str(), f.o.classes, f.o.per_class, f.o.val_count(), static_cast<long long>(m.images),
              static_cast<long long>(m.grey), static_cast<long long>(m.palette), static_cast<long long>(m.cmyk),
              f.o.width, f.o.height, static_cast<double>(m.bytes) / 1e6, m.seconds);
}

data::FolderLayout parse_layout(const std::string& layout, const std::string& dir) {
  if (layout == "auto") return data::detect_layout(dir);
  if (layout == "imagefolder") return data::FolderLayout::imagefolder;
  if (layout == "tinyimagenet") return data::FolderLayout::tinyimagenet;
  usage_fail("--layout '", excerpt(layout), "': use auto (tinyimagenet when DIR has wnids.txt), imagefolder or tinyimagenet");
}

// --split: the training split (RandomResizedCrop + flip) or the evaluation one (Resize + CenterCrop).
data::Split parse_split(const std::string& split) {
  if (split == "train") return data::Split::train;
  if (split == "val" || split == "test") return data::Split::test;
  usage_fail("--split '", excerpt(split), "': use train (RandomResizedCrop + flip) or val (Resize + CenterCrop)");
}

// --image-size, checked; 0: the layout's default (224; tinyimagenet: 64).
int image_size_of(int image_size, data::FolderLayout layout) {
  if (image_size < 0) usage_fail("--image-size ", image_size, ": give a side in pixels, or 0 for the default");
  if (image_size > 0) return image_size;
  return data::default_image_size(layout == data::FolderLayout::tinyimagenet ? "tinyimagenet" : "imagefolder");
}

struct CheckFlags {
  std::string dir, layout = "auto";
  int threads = 0;
};

void run_check(const CheckFlags& f) {
  const data::FolderLayout layout = parse_layout(f.layout, f.dir);
  const data::FolderCheck c = data::check_image_folder(f.dir, layout, f.threads);
  std::printf("%s: %s layout, %zu split(s)\n", f.dir.c_str(),
              layout == data::FolderLayout::tinyimagenet ? "tinyimagenet" : "imagefolder", c.splits.size());
  for (const data::CheckedSplit& s : c.splits) {
    int64_t total = 0;
    for (int64_t n : s.counts) total += n;
    std::printf("\n%s (%s): %zu classes, %lld images, %zu unreadable; decoded in %.1f s (%.0f images/s)\n",
                s.name.c_str(), s.root.c_str(), s.classes.size(), static_cast<long long>(total), s.bad.size(), s.seconds,
                s.seconds > 0 ? static_cast<double>(total) / s.seconds : 0.0);
    std::printf("  kinds:");
    for (const auto& [kind, n] : s.kinds) std::printf(" %s %lld;", kind.c_str(), static_cast<long long>(n));
    std::printf("\n  %-24s %8s\n", "class", "images");
    for (size_t k = 0; k < s.classes.size(); ++k)
      std::printf("  %-24s %8lld\n", excerpt(s.classes[k], 24).c_str(), static_cast<long long>(s.counts[k]));
  }
  if (c.bad_files() > 0) {
    std::printf("\nunreadable files:\n");
    for (const data::CheckedSplit& s : c.splits)
      for (const auto& [path, why] : s.bad) std::printf("  %s: %s\n", path.c_str(), why.c_str());
    std::fflush(stdout);
    fail(c.bad_files(), " unreadable image file(s) in ", f.dir, " (listed above): replace or remove them, or train "
         "with --on-bad-image skip");
  }
}

struct PreviewFlags {
  std::string dir, layout = "auto", split = "val", out, tensors;
  int count = 16, image_size = 0;
  uint64_t seed = 0;
  bool force = false;
  data::ImageSetOptions images;
  ImageFlags image_flags;
};

void run_preview(PreviewFlags& f) {
  const data::FolderLayout layout = parse_layout(f.layout, f.dir);
  const data::Split split = parse_split(f.split);
  apply_image_flags(f.images, f.image_flags);
  f.images.transform.size = image_size_of(f.image_size, layout);
  if (f.count < 1 || f.count > 4096) usage_fail("--count ", f.count, ": give between 1 and 4096 samples");
  // Outputs first: neither may replace a file dpx did not write, nor be the other.
  check_outputs_distinct({{"--out", f.out}, {"--tensors", f.tensors}}, {});
  check_output_file(f.out, FileKind::preview_png, "--out", f.force);
  if (!f.tensors.empty()) check_output_file(f.tensors, FileKind::weights, "--tensors", f.force);
  check_writable_parent(f.out, "--out");
  if (!f.tensors.empty()) check_writable_parent(f.tensors, "--tensors");
  const auto set = data::load_image_folder(layout, f.dir, split, f.images, f.seed);
  const data::Preview p = data::preview_samples(*set, f.count);
  const std::vector<uint8_t> png = data::preview_grid_png(p, set->transform());
  write_file_atomic(f.out, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()), "--out");
  std::printf("wrote %s: the first %lld %s samples of %s, %s, (3, %d, %d) each\n", f.out.c_str(),
              static_cast<long long>(p.images.size(0)), f.split.c_str(), f.dir.c_str(),
              split == data::Split::train ? "RandomResizedCrop + flip of epoch 0" : "Resize + CenterCrop",
              set->transform().size, set->transform().size);
  if (!f.tensors.empty()) {
    write_safetensors(f.tensors, {{"images", p.images}, {"labels", p.labels}},
                      {{std::string(kGeneratorKey), std::string(kGeneratorValue)},
                       {"source", "dpx data preview"},
                       {"split", f.split}},
                      "--tensors");
    std::printf("wrote %s: images (%lld, 3, %d, %d) f32 and labels, normalised as the model sees them\n",
                f.tensors.c_str(), static_cast<long long>(p.images.size(0)), set->transform().size, set->transform().size);
  }
}

struct LoaderBenchFlags {
  std::string dir, layout = "auto", split = "train";
  int image_size = 0, batches = 20, warmup = 2;
  int64_t batch_size = 64;
  std::vector<int> workers = {1, 2};
  uint64_t seed = 0;
  data::ImageSetOptions images;
  ImageFlags image_flags;
};

// The loader of dpx train on one rank, without the model: `warmup` batches, then `batches` timed
// by the wall clock from the first timed next() to the last, per number of workers.
void run_bench(LoaderBenchFlags& f) {
  const data::FolderLayout layout = parse_layout(f.layout, f.dir);
  const data::Split split = parse_split(f.split);
  apply_image_flags(f.images, f.image_flags);
  f.images.transform.size = image_size_of(f.image_size, layout);
  if (f.batch_size < 1 || f.batch_size > 65536) usage_fail("--batch-size ", f.batch_size, ": give 1 to 65536");
  if (f.batches < 1 || f.batches > 1000000) usage_fail("--batches ", f.batches, ": give 1 to 1000000 timed batches");
  if (f.warmup < 0 || f.warmup > 1000000) usage_fail("--warmup ", f.warmup, ": give 0 to 1000000 batches");
  if (f.workers.empty()) usage_fail("--workers: give at least one number of loader threads");
  for (int w : f.workers)
    if (w < 0 || w > 256) usage_fail("--workers ", w, ": give 0 (the calling thread loads) to 256 threads");
  const auto set = data::load_image_folder(layout, f.dir, split, f.images, f.seed);
  const int cores = hardware_threads();
  std::printf("%s, %s split: %lld images, (3, %d, %d) each, batch %lld; %d timed batches after %d warm-up ones; %d "
              "cores\n",
              f.dir.c_str(), f.split.c_str(), static_cast<long long>(set->size()), set->transform().size,
              set->transform().size, static_cast<long long>(f.batch_size), f.batches, f.warmup, cores);
  if (static_cast<int64_t>(f.batches + f.warmup) * f.batch_size > set->size())
    std::printf("note: %lld images are fewer than the %lld the run reads: later epochs read the files again (from "
                "the page cache), as a DataLoader over a small folder does\n",
                static_cast<long long>(set->size()), static_cast<long long>(f.batches + f.warmup) * f.batch_size);
  std::printf("%8s %12s %18s %18s %14s\n", "workers", "images/s", "images/s per core", "busy img/s/worker",
              "ms per batch");
  for (int w : f.workers) {
    data::LoaderOptions o;
    o.batch_size = f.batch_size;
    o.drop_last = true;
    o.seed = f.seed;
    o.num_workers = w;
    data::DataLoader loader(set, o);
    int64_t epoch = 0, images = 0;
    loader.start_epoch(epoch);
    auto next = [&] {
      std::optional<data::Batch> b = loader.next();
      while (!b) {
        loader.start_epoch(++epoch);
        b = loader.next();
      }
      return b->images.size(0);
    };
    for (int i = 0; i < f.warmup; ++i) next();
    const data::LoaderStats before = loader.stats();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < f.batches; ++i) images += next();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const data::LoaderStats after = loader.stats();
    const double rate = static_cast<double>(images) / wall;
    const double busy = after.busy_s - before.busy_s;
    // The threads that load: the workers, or with 0 the calling thread; never more than the cores.
    const int loading = std::min(std::max(w, 1), cores);
    std::printf("%8d %12.1f %18.1f %18.1f %14.2f\n", w, rate, rate / loading,
                busy > 0 ? static_cast<double>(after.images - before.images) / busy : 0.0,  // busy_s sums the workers
                wall / f.batches * 1e3);
    std::fflush(stdout);
  }
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "image folders: make one, check one, preview what the model sees");
  data->require_subcommand(1);

  auto* make = data->add_subcommand(
      "make-imagefolder",
      "write a photo-like image data set in torchvision's ImageFolder layout: DIR/train/<class>/, DIR/val/<class>/");
  auto mf = std::make_shared<MakeFlags>();
  make->add_option("dir", mf->dir, "the folder to make (must not exist, be empty, or, with --force, be an earlier one)")
      ->required()
      ->check(output_path());
  make->add_option("--classes", mf->o.classes, "number of classes")->capture_default_str();
  make->add_option("--per-class", mf->o.per_class, "training images per class")->capture_default_str();
  make->add_option("--val-per-class", mf->o.val_per_class, "validation images per class (-1: max(2, per-class / 10))")
      ->capture_default_str();
  make->add_option("--size", mf->size, "WxH: the images' mean size; each varies in area (0.6-1.4x) and aspect ratio")
      ->capture_default_str();
  make->add_option("--format", mf->format, "jpeg or png (about 4 % of images are grey, 3 % palette PNGs, and with jpeg "
                                           "1 % CMYK)")
      ->capture_default_str();
  make->add_option("--quality", mf->o.quality, "JPEG quality, 1-100")->capture_default_str();
  make->add_option("--seed", mf->o.seed, "seed of the images' content and sizes")->check(non_negative())->capture_default_str();
  make->add_option("--threads", mf->o.threads, "threads drawing and encoding (0: every core)")->capture_default_str();
  make->add_flag("--force", mf->o.force, "replace DIR when an earlier dpx data make-imagefolder made it");
  make->callback([mf] { run_make(*mf); });

  auto* check = data->add_subcommand(
      "check", "decode every image of a folder's splits, count images per class and list unreadable files (exit 1 "
               "when there are any)");
  auto cf = std::make_shared<CheckFlags>();
  check->add_option("dir", cf->dir, "the image folder")->required();
  check->add_option("--layout", cf->layout, "auto (tinyimagenet when DIR has wnids.txt), imagefolder or tinyimagenet")
      ->capture_default_str();
  check->add_option("--threads", cf->threads, "threads decoding (0: every core)")->capture_default_str();
  check->callback([cf] { run_check(*cf); });

  auto* preview = data->add_subcommand(
      "preview", "the first samples of a split (classes sorted, files sorted within a class) as the model sees "
                 "them: a grid of the de-normalised images, and with --tensors the exact tensors");
  auto pf = std::make_shared<PreviewFlags>();
  preview->add_option("dir", pf->dir, "the image folder")->required();
  preview->add_option("--layout", pf->layout, "auto, imagefolder or tinyimagenet")->capture_default_str();
  preview->add_option("--split", pf->split,
                      "val (Resize + CenterCrop) or train (RandomResizedCrop + flip as epoch 0 draws them from --seed)")
      ->capture_default_str();
  preview->add_option("--count", pf->count, "samples shown")->capture_default_str();
  preview->add_option("--image-size", pf->image_size, "side S of each sample (0: 224; tinyimagenet: 64)")
      ->capture_default_str();
  preview->add_option("--seed", pf->seed, "seed of the training augmentation (as dpx train --seed)")
      ->check(non_negative())
      ->capture_default_str();
  preview->add_option("--out", pf->out, "the grid image to write (PNG)")->required()->check(output_path());
  preview->add_option("--tensors", pf->tensors,
                      "also write the normalised tensors (safetensors: images (N, 3, S, S) f32, labels (N) i64)")
      ->check(output_path());
  preview->add_flag("--force", pf->force, "replace --out or --tensors files that exist and were not written by dpx");
  add_image_flags(*preview, pf->images, pf->image_flags, false);  // a preview stops at a bad file, naming it
  preview->callback([pf] { run_preview(*pf); });

  auto* bench = data->add_subcommand(
      "bench", "time the training loader alone (read, decode, augment, batch; no model) per number of workers: "
               "images/s, per core, and each worker's busy rate, as a timed loop over torch's DataLoader");
  auto bf = std::make_shared<LoaderBenchFlags>();
  bench->add_option("dir", bf->dir, "the image folder")->required();
  bench->add_option("--layout", bf->layout, "auto, imagefolder or tinyimagenet")->capture_default_str();
  bench->add_option("--split", bf->split, "train (RandomResizedCrop + flip) or val (Resize + CenterCrop)")
      ->capture_default_str();
  bench->add_option("--image-size", bf->image_size, "side S of each sample (0: 224; tinyimagenet: 64)")
      ->capture_default_str();
  bench->add_option("--batch-size", bf->batch_size, "images per batch")->capture_default_str();
  bench->add_option("--workers", bf->workers, "loader threads (0: the calling thread loads); a list times each")
      ->delimiter(',')
      ->capture_default_str();
  bench->add_option("--batches", bf->batches, "batches timed")->capture_default_str();
  bench->add_option("--warmup", bf->warmup, "batches read first, not timed (the workers start, the files are read "
                                            "into the page cache)")
      ->capture_default_str();
  bench->add_option("--seed", bf->seed, "seed of the shuffle and the augmentation")->check(non_negative())->capture_default_str();
  add_image_flags(*bench, bf->images, bf->image_flags);
  bench->callback([bf] { run_bench(*bf); });
}

}  // namespace dpx::tools
