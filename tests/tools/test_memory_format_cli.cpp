// --memory-format contiguous|channels_last (dpx train, dpx bench): a channels-last run of resnet18
// on CPU ranks trains as the contiguous one, loss for loss, and says so in config.json; a format it
// does not know, and a model with a layer that has no channels-last computation (Swin), are usage errors
// naming the flag (and the layers) before any step. The GPU side: tests/cuda/test_channels_last.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/csv_table.hpp"
#include "run_dpx.hpp"
#include "tests/common/files.hpp"

using dpx::testing::file_text;
using dpx::testing::TempDir;

namespace {
const std::string kTrain = "train --model resnet18 --dataset synthetic --image-size 32 --synthetic-size 64 "
                           "--batch-size 8 --steps 3 --warmup 0 --no-eval --threads 1 --workers 0 ";

// steps.csv's loss column, as dpx wrote it.
std::vector<std::string> losses(const std::filesystem::path& steps_csv) {
  const auto table = dpx::analysis::CsvTable::read(steps_csv.string(), "steps.csv");
  std::vector<std::string> out;
  for (size_t r = 0; r < table.rows(); ++r) out.push_back(table.text(r, table.column("loss")));
  return out;
}
}  // namespace

TEST_CASE("--memory-format channels_last trains resnet18 as contiguous does, loss for loss, and config.json says so") {
  const TempDir dir("memory_format");
  std::vector<std::string> seen[2];
  for (int i = 0; i < 2; ++i) {
    const std::string format = i == 0 ? "contiguous" : "channels_last";
    const auto out = dir.path / format;
    const DpxResult r = run_dpx(kTrain + "--memory-format " + format + " --out " + out.string());
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    CHECK(nlohmann::json::parse(file_text(out / "config.json")).at("memory_format") == format);
    // The start-up box says so where it is not the default.
    CHECK((r.output.find("| memory format | channels_last") != std::string::npos) == (format == "channels_last"));
    seen[i] = losses(out / "steps.csv");
  }
  CHECK(seen[0].size() == 3);
  CHECK(seen[1] == seen[0]);
  const DpxResult help = run_dpx("bench --help");
  CHECK(help.output.find("--memory-format") != std::string::npos);
}

TEST_CASE("--memory-format refuses an unknown format, and a model it cannot lay out, naming the layers") {
  DpxResult r = run_dpx(kTrain + "--memory-format nhwc");
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("dpx: error: --memory-format: unknown memory format 'nhwc': use contiguous or channels_last") !=
        std::string::npos);
  r = run_dpx("train --model swin_t --dataset synthetic --image-size 32 --synthetic-size 16 --batch-size 4 "
              "--steps 1 --warmup 0 --no-eval --threads 1 --workers 0 --memory-format channels_last");
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("dpx: error: --memory-format channels_last: features.0.1 (Permute), features.0.2 (LayerNorm)") !=
        std::string::npos);
  CHECK(r.output.find("| step ") == std::string::npos);
}
