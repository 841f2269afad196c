// dpx train's mixed-precision flags end to end: --grad-dtype, --loss-scale (and its tuning) and
// --precision refuse what they cannot do with a usage error naming the flag (exit 2); a DDP run
// with fp16 gradients records its dtype and loss scaling in config.json, each step's scale and
// skip in steps.csv, and sends half the bytes of an fp32 run; a run resumed from a checkpoint
// continues its dynamic loss scale; a diverging fp16 run still stops.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/memory.hpp"
#include "run_dpx.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::file_text;
using dpx::testing::TempDir;

namespace {

const std::string kTrainAnySteps = "train --model mlp --dataset synthetic --image-size 8 --channels 1 "
                                   "--synthetic-size 256 --batch-size 16 --warmup 0 --no-eval --threads 2 --workers 0 ";
const std::string kTrain = kTrainAnySteps + "--steps 4 ";
const std::string kDdp = kTrain + "--devices cpu:2 --parallel ddp ";

// The values of one column of a CSV file, by its name in the header.
std::vector<std::string> csv_column(const fs::path& csv, const std::string& name) {
  std::istringstream in(file_text(csv));
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  std::stringstream hs(line);
  for (std::string cell; std::getline(hs, cell, ',');) header.push_back(cell);
  const auto at = std::find(header.begin(), header.end(), name);
  REQUIRE(at != header.end());
  std::vector<std::string> out;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    out.push_back(cells.at(static_cast<size_t>(at - header.begin())));
  }
  return out;
}

}  // namespace

TEST_CASE("mixed-precision flags that cannot apply are usage errors naming the flag") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {kDdp + "--grad-dtype fp8", "--grad-dtype: unknown dtype 'fp8': use fp32, bf16 or fp16"},
      {kTrain + "--grad-dtype bf16", "--grad-dtype bf16 is the dtype of DDP's gradient all-reduce, and --parallel none"},
      {kTrain + "--devices cpu:2 --parallel dp --grad-dtype fp16", "--grad-dtype fp16: DataParallel sums"},
      {kTrain + "--precision fp64", "--precision: unknown precision 'fp64': use fp32, tf32, bf16 or fp16"},
      {kTrain + "--precision bf16", "--precision bf16 needs --devices cuda:N"},
      {kDdp + "--precision fp16 --grad-dtype fp16", "--precision fp16 needs --devices cuda:N"},
      {kTrain + "--precision tf32", "--precision tf32 needs --devices cuda:N"},
      {kTrain + "--loss-scale lots", "--loss-scale 'lots': use auto"},
      {kTrain + "--loss-scale=-4", "--loss-scale '-4': use auto"},
      {kTrain + "--loss-scale 0", "--loss-scale '0': use auto"},
      {kTrain + "--loss-scale inf", "--loss-scale 'inf': use auto"},
      {kTrain + "--loss-scale dynamic --loss-scale-window 0", "--loss-scale-window must be at least 1"},
      {kTrain + "--loss-scale dynamic --initial-loss-scale 0", "--initial-loss-scale must be a positive number"},
      {kTrain + "--initial-loss-scale 1024", "--initial-loss-scale and --loss-scale-window tune dynamic loss scaling"},
      {kDdp + "--grad-dtype fp16 --loss-scale 8 --loss-scale-window 10", "--initial-loss-scale and --loss-scale-window"},
  };
  for (const auto& [args, needle] : cases) {
    CAPTURE(args);
    const DpxResult r = run_dpx(args);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("dpx: error: " + needle) != std::string::npos);
    CHECK(r.output.find("| step ") == std::string::npos);
  }
}

TEST_CASE("GPU-only options (--precision bf16/fp16, nccl's half gradients, p2p replicas) pass the option checks: "
          "without a GPU, only the device is refused") {
  for (const std::string& args : {kTrain + "--devices cuda:0 --precision bf16",
                                 kTrain + "--devices cuda:0 --precision fp16",
                                 kTrain + "--devices cuda:0,cuda:1 --parallel ddp --backend nccl --grad-dtype bf16",
                                 kTrain + "--devices cuda:0,cuda:0 --parallel ddp --backend p2p"}) {
    CAPTURE(args);
    if (dpx::cuda::available()) continue;  // trained on a GPU by tests/cuda/test_precision.cpp and test_nccl.cpp
    const DpxResult r = run_dpx(args);
    CAPTURE(r.output);
    CHECK(r.code != 0);
    CHECK(r.output.find("dpx: error: --precision") == std::string::npos);
    CHECK(r.output.find("dpx: error: --grad-dtype") == std::string::npos);
    CHECK((r.output.find("no usable CUDA device") != std::string::npos || r.output.find("needs a GPU") != std::string::npos ||
           r.output.find("not built") != std::string::npos || r.output.find("without CUDA") != std::string::npos));
    CHECK(r.output.find("| step ") == std::string::npos);
    if (args.find("--backend") != std::string::npos)  // the GPU backends check before anything is printed
      CHECK(r.output.find("| model ") == std::string::npos);
  }
}

TEST_CASE("fp16 gradients under DDP: config.json and steps.csv say so, and half the bytes travel") {
  const TempDir tmp("mixed_precision_run");
  const fs::path full = tmp.path / "fp32", half = tmp.path / "fp16";
  const DpxResult a = run_dpx(kDdp + "--out " + full.string());
  CAPTURE(a.output);
  REQUIRE(a.code == 0);
  const DpxResult b = run_dpx(kDdp + "--grad-dtype fp16 --out " + half.string());
  CAPTURE(b.output);
  REQUIRE(b.code == 0);
  CHECK(b.output.find("| precision  | fp32 compute, fp32 weights, fp16 gradient all-reduce, dynamic loss scale from "
                      "65536 (x2 after 2000 good updates)") != std::string::npos);
  CHECK(b.output.find("ETA 0m00s | loss scale ") != std::string::npos);  // the progress line
  CHECK(b.output.find("(formula N/(B*k)*params*2)") != std::string::npos);
  CHECK(b.output.find(" of 4 updates skipped (inf/NaN gradients)") != std::string::npos);
  CHECK(a.output.find("| precision ") == std::string::npos);  // all fp32: no row
  CHECK(a.output.find("loss scale") == std::string::npos);
  const auto config = nlohmann::json::parse(file_text(half / "config.json"));
  CHECK(config.at("grad_dtype") == "fp16");
  CHECK(config.at("precision") == "fp32");
  CHECK(config.at("loss_scale") == "dynamic");  // auto, with fp16 gradients
  CHECK(config.at("initial_loss_scale") == 65536.0);
  CHECK(config.at("loss_scale_window") == 2000);
  CHECK(nlohmann::json::parse(file_text(full / "config.json")).at("loss_scale").is_null());
  const auto bytes_full = csv_column(full / "steps.csv", "comm_bytes");
  const auto bytes_half = csv_column(half / "steps.csv", "comm_bytes");
  REQUIRE(bytes_half.size() == 8);  // 2 ranks x 4 steps
  REQUIRE(bytes_full.size() == 8);
  for (size_t i = 0; i < bytes_half.size(); ++i) CHECK(2 * std::stoll(bytes_half[i]) == std::stoll(bytes_full[i]));
  for (const std::string& s : csv_column(half / "steps.csv", "loss_scale")) CHECK(std::stod(s) >= 1);
  CHECK(csv_column(half / "steps.csv", "loss_scale").front() == "65536");
  for (const std::string& s : csv_column(full / "steps.csv", "loss_scale")) CHECK(s == "1");
  for (const std::string& s : csv_column(full / "steps.csv", "update_skipped")) CHECK(s == "0");
}

TEST_CASE("dynamic loss scaling does not hide a diverging run: a non-finite loss still stops it") {
  const DpxResult r = run_dpx(kDdp + "--grad-dtype fp16 --lr 1e20");
  CAPTURE(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("dpx: error: non-finite loss (") != std::string::npos);
  CHECK(r.output.find("after the all-reduce: every rank has them); lower --lr") != std::string::npos);
}

TEST_CASE("a run resumed from a checkpoint continues its dynamic loss scale, and ends as the run that never stopped") {
  // From 2^20 with a window of 2 the scale moves both ways within 8 steps (skips, then growth);
  // at the checkpoint after step 4 the scaler is one good update into its window, which the resumed
  // run must remember to grow the scale after step 5 as the full run does.
  const TempDir tmp("mixed_precision_resume");
  const std::string run = kTrainAnySteps +
                          "--devices cpu:2 --parallel ddp --steps 8 --lr-schedule constant --grad-dtype fp16 "
                          "--initial-loss-scale 1048576 "
                                 "--loss-scale-window 2 --checkpoint-every 4 ";
  auto train = [&](const std::string& name, const std::string& extra) {
    const fs::path out = tmp.path / name;
    const DpxResult r = run_dpx(run + "--out " + out.string() + " --save " + (out / "w.safetensors").string() + " " +
                                extra);
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    return out;
  };
  const fs::path full = train("full", "--checkpoint-dir " + (tmp.path / "ck").string());
  const std::vector<std::string> scales = csv_column(full / "steps.csv", "loss_scale");
  const std::vector<std::string> skips = csv_column(full / "steps.csv", "update_skipped");
  CHECK(std::count(skips.begin(), skips.end(), "1") >= 2);        // some updates overflowed
  CHECK(std::set<std::string>(scales.begin(), scales.end()).size() >= 3);  // and the scale moved
  const fs::path resumed =
      train("resumed", "--checkpoint-dir " + (tmp.path / "ck2").string() + " --resume " +
                           (tmp.path / "ck" / "checkpoint-000000004.safetensors").string());
  CHECK(file_text(full / "w.safetensors") == file_text(resumed / "w.safetensors"));  // byte for byte
  CHECK(csv_column(resumed / "steps.csv", "loss_scale") == scales);
  CHECK(csv_column(resumed / "steps.csv", "update_skipped") == skips);
}
