// `dpx data` end to end: make-imagefolder writes a decodable folder and refuses to overwrite what it
// did not make; check counts and lists unreadable files (exit 1); preview writes the grid and the
// exact tensors, which equal torchvision's ImageFolder on the fixture folder; bench times the loader
// alone per number of workers.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/data/image_decode.hpp"
#include "core/data/image_folder.hpp"
#include "core/safetensors.hpp"
#include "run_dpx.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::TempDir;

namespace {

bool has(const DpxResult& r, const std::string& s) { return r.output.find(s) != std::string::npos; }

int64_t count_files(const fs::path& dir) {
  int64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

}  // namespace

TEST_CASE("dpx data make-imagefolder writes a decodable folder, and replaces only its own with --force") {
  TempDir tmp("data_make");
  const std::string dir = tmp.file("set");
  DpxResult r = run_dpx("data make-imagefolder " + dir + " --classes 3 --per-class 12 --val-per-class 2 --size 64x48 --threads 2");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r, "wrote " + dir + ": 3 classes, 12 train and 2 val images per class (42 images"));
  CHECK(count_files(fs::path(dir) / "train" / "c0002") == 12);
  CHECK(count_files(fs::path(dir) / "val" / "c0000") == 2);
  CHECK(fs::is_regular_file(fs::path(dir) / "dpx-imagefolder.json"));
  CHECK(tmp.entries() == std::vector<std::string>{"set"});  // no staging folder left
  // Every file decodes, and the sizes vary.
  const dpx::data::FolderIndex index = dpx::data::index_imagefolder(dir + "/train");
  std::vector<uint8_t> bytes;
  std::set<int> widths;
  for (int64_t i = 0; i < index.size(); ++i) {
    dpx::data::read_image_file(index.path(i), bytes);
    dpx::data::RgbImage img;
    dpx::data::decode_rgb(bytes, index.path(i), img);
    widths.insert(img.width);
  }
  CHECK(widths.size() > 5);
  // The same options and seed make the same files.
  r = run_dpx("data make-imagefolder " + tmp.file("again") + " --classes 3 --per-class 12 --val-per-class 2 --size 64x48");
  REQUIRE(r.code == 0);
  CHECK(dpx::testing::file_text(dir + "/train/c0001/c0001_000005.jpg") ==
        dpx::testing::file_text(tmp.file("again") + "/train/c0001/c0001_000005.jpg"));
  // An existing set: refused without --force, replaced with it.
  r = run_dpx("data make-imagefolder " + dir + " --classes 2 --per-class 3 --size 32x32");
  CHECK(r.code == 2);
  CHECK(has(r, "pass --force to replace it"));
  r = run_dpx("data make-imagefolder " + dir + " --classes 2 --per-class 3 --size 32x32 --format png --force");
  CHECK(r.code == 0);
  CHECK(!fs::exists(fs::path(dir) / "train" / "c0002"));
  CHECK(count_files(fs::path(dir) / "train") == 6);
  // A folder dpx did not make is never replaced, --force or not.
  fs::create_directories(tmp.file("mine"));
  std::ofstream(tmp.file("mine") + "/notes.txt") << "keep me";
  r = run_dpx("data make-imagefolder " + tmp.file("mine") + " --classes 2 --per-class 2 --force");
  CHECK(r.code == 2);
  CHECK(has(r, "was not made by dpx data make-imagefolder"));
  CHECK(dpx::testing::file_text(tmp.file("mine") + "/notes.txt") == "keep me");
  // Bad options name the flag.
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"--size 64", "--size '64': give WIDTHxHEIGHT"},
           {"--classes 0", "--classes 0"},
           {"--format gif", "--format 'gif': use jpeg or png"},
           {"--quality 101", "--quality 101"}}) {
    r = run_dpx("data make-imagefolder " + tmp.file("bad") + " " + args);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(has(r, needle));
  }
  CHECK(!fs::exists(tmp.file("bad")));
}

TEST_CASE("dpx data check counts images per class and lists unreadable files, exiting 1 when there are any") {
  TempDir tmp("data_check");
  const std::string dir = tmp.file("set");
  REQUIRE(run_dpx("data make-imagefolder " + dir + " --classes 2 --per-class 5 --val-per-class 2 --size 48x40").code == 0);
  DpxResult r = run_dpx("data check " + dir + " --threads 2");
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK(has(r, "imagefolder layout, 2 split(s)"));
  CHECK(has(r, "train (" + dir + "/train): 2 classes, 10 images, 0 unreadable"));
  CHECK(has(r, "val (" + dir + "/val): 2 classes, 4 images, 0 unreadable"));
  CHECK(has(r, "  c0001                           5"));
  // A truncated file and an empty one are listed; the exit code says so.
  const std::string victim = dir + "/train/c0000/c0000_000001.jpg";
  std::string bytes = dpx::testing::file_text(victim);
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  std::ofstream(dir + "/val/c0001/zero.jpg").close();
  r = run_dpx("data check " + dir);
  CHECK(r.code == 1);
  CHECK(has(r, victim + ": damaged JPEG data"));
  CHECK(has(r, dir + "/val/c0001/zero.jpg: empty file (0 bytes)"));
  CHECK(has(r, "2 unreadable image file(s) in " + dir));
  // Unlike splits and an empty class are errors of the layout.
  fs::create_directories(dir + "/val/c0009");
  r = run_dpx("data check " + dir);
  CHECK(r.code == 2);
  CHECK(has(r, "1 class folder(s) hold no image file"));
  CHECK(has(r, "'c0009'; add images or remove the folder(s)"));
  fs::copy_file(dir + "/val/c0000/" + fs::directory_iterator(dir + "/val/c0000")->path().filename().string(),
                dir + "/val/c0009/a.jpg");
  r = run_dpx("data check " + dir);
  CHECK(r.code == 2);
  CHECK(has(r, "'c0009' is in " + dir + "/val but not in " + dir + "/train"));
  r = run_dpx("data check " + tmp.file("nowhere"));
  CHECK(r.code == 2);
  CHECK(has(r, "not found"));
}

TEST_CASE("dpx data preview writes the grid and torchvision's ImageFolder tensors, and guards its outputs") {
  TempDir tmp("data_preview");
  const std::string folder = std::string(DPX_SOURCE_DIR) + "/tests/core/data/images/folder";
  const std::string grid = tmp.file("grid.png"), tensors = tmp.file("val.safetensors");
  DpxResult r = run_dpx("data preview " + folder + " --count 10 --image-size 16 --out " + grid + " --tensors " + tensors);
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r, "the first 4 val samples"));
  // The tensors are torchvision's, bit for bit (benchmarks/pytorch/make_image_fixtures.py).
  const dpx::SafeTensors got = dpx::read_safetensors(tensors);
  const dpx::SafeTensors want = dpx::read_safetensors(std::string(DPX_SOURCE_DIR) + "/tests/core/data/images/expected.safetensors");
  const dpx::Tensor* images = got.find("images");
  REQUIRE(images != nullptr);
  CHECK(images->to_vector() == want.find("folder/val_images")->to_vector());
  CHECK(got.find("labels")->to_vector() == want.find("folder/val_labels")->cast(dpx::DType::f32).to_vector());
  // The grid: 2 x 2 samples of 16 with 2-pixel gaps, a PNG that decodes.
  std::vector<uint8_t> bytes;
  dpx::data::read_image_file(grid, bytes);
  dpx::data::RgbImage img;
  dpx::data::decode_rgb(bytes, grid, img);
  CHECK(img.width == 2 * 16 + 3 * 2);
  // Training samples of epoch 0, and again: dpx's own grid is replaced without --force.
  r = run_dpx("data preview " + folder + " --split train --count 3 --image-size 16 --seed 4 --out " + grid);
  CHECK(r.code == 0);
  CHECK(has(r, "RandomResizedCrop + flip of epoch 0"));
  // A file dpx did not write is refused, and left as it was.
  std::ofstream(tmp.file("photo.png")) << "not dpx's";
  r = run_dpx("data preview " + folder + " --out " + tmp.file("photo.png"));
  CHECK(r.code == 2);
  CHECK(has(r, "--out"));
  CHECK(dpx::testing::file_text(tmp.file("photo.png")) == "not dpx's");
  r = run_dpx("data preview " + folder + " --out " + grid + " --tensors " + grid);
  CHECK(r.code == 2);
  r = run_dpx("data preview " + folder + " --split test2 --out " + grid);
  CHECK(r.code == 2);
  CHECK(has(r, "--split 'test2'"));
  r = run_dpx("data preview " + folder + " --mean 1,2 --out " + grid);
  CHECK(r.code == 2);
  CHECK(has(r, "--mean '1,2': give 3 comma-separated numbers"));
  r = run_dpx("data preview --help");
  CHECK(has(r, "--tensors"));
  CHECK(has(r, "--crop-scale"));
}

TEST_CASE("dpx data bench times the loader alone per number of workers, and refuses bad values naming the flag") {
  TempDir tmp("data_bench");
  const std::string dir = tmp.file("set");
  REQUIRE(run_dpx("data make-imagefolder " + dir + " --classes 2 --per-class 8 --val-per-class 2 --size 64x48").code == 0);
  DpxResult r = run_dpx("data bench " + dir + " --workers 0,2 --batch-size 4 --batches 6 --warmup 1 --image-size 32");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r, dir + ", train split: 16 images, (3, 32, 32) each, batch 4; 6 timed batches after 1 warm-up ones"));
  // 7 batches of 4 from 16 images: the second epoch is read too, and the note says so.
  CHECK(has(r, "note: 16 images are fewer than the 28 the run reads"));
  // One row per number of workers: workers, images/s, per core, busy rate per worker, ms per batch.
  for (const char* w : {"\n       0 ", "\n       2 "}) {
    CAPTURE(w);
    const size_t at = r.output.find(w);
    REQUIRE(at != std::string::npos);
    std::istringstream row(r.output.substr(at + 1, r.output.find('\n', at + 1) - at - 1));
    double workers = -1, rate = 0, per_core = 0, busy = 0, ms = 0;
    row >> workers >> rate >> per_core >> busy >> ms;
    CHECK(rate > 0);
    CHECK(per_core > 0);
    CHECK(per_core <= rate);
    CHECK(busy > 0);
    CHECK(ms == doctest::Approx(4 / rate * 1e3).epsilon(0.05));
  }
  for (const auto& [flags, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--workers -1", "--workers -1"},
           {"--batches 0", "--batches 0"},
           {"--batch-size 0", "--batch-size 0"},
           {"--split both", "--split 'both'"},
           {"--crop-scale 2,1", "--crop-scale"}}) {
    DpxResult bad = run_dpx("data bench " + dir + " " + flags);
    CAPTURE(bad.output);
    CHECK(bad.code == 2);
    CHECK(has(bad, expect));
  }
  DpxResult none = run_dpx("data bench " + tmp.file("nowhere"));
  CHECK(none.code == 2);
  CHECK(has(none, "not found"));
}
