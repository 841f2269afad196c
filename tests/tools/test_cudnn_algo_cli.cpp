// --cudnn-algo heuristic|search (dpx train, dpx bench): a choice it does not know and a search on
// CPU ranks are usage errors naming the flag; the choice is recorded in config.json; on a GPU
// device it passes the option checks (its convolutions are tested in tests/cuda/test_conv2d.cpp).
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/cuda/memory.hpp"
#include "run_dpx.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::file_text;
using dpx::testing::TempDir;

namespace {
const std::string kTrain = "train --model mlp --dataset synthetic --image-size 8 --channels 1 --synthetic-size 64 "
                           "--batch-size 16 --steps 2 --warmup 0 --no-eval --threads 1 --workers 0 ";
}  // namespace

TEST_CASE("--cudnn-algo refuses an unknown choice and a search on CPU ranks, naming the flag") {
  for (const std::string& cmd : {std::string("train"), std::string("bench")}) {
    CAPTURE(cmd);
    const std::string base = cmd == "train" ? kTrain
                                            : "bench --models mlp --dataset synthetic --image-size 8 --channels 1 "
                                              "--batch-sizes 16 --steps 2 --warmup 0 --no-eval --devices cpu:1 ";
    DpxResult r = run_dpx(base + "--cudnn-algo fastest");
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("--cudnn-algo") != std::string::npos);
    CHECK(r.output.find("heuristic") != std::string::npos);

    r = run_dpx(base + "--cudnn-algo search");
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("dpx: error: --cudnn-algo search chooses cuDNN's GPU convolution algorithms and needs "
                        "--devices cuda:N") != std::string::npos);
    CHECK(r.output.find("| step ") == std::string::npos);
  }
}

TEST_CASE("--cudnn-algo is recorded in config.json (heuristic by default) and documented in --help") {
  TempDir dir("cudnn_algo");
  const DpxResult r = run_dpx(kTrain + "--out " + (dir.path / "run").string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const auto config = nlohmann::json::parse(file_text(dir.path / "run" / "config.json"));
  CHECK(config.at("cudnn_algo") == "heuristic");
  for (const char* cmd : {"train --help", "bench --help"}) {
    const DpxResult help = run_dpx(cmd);
    CAPTURE(cmd);
    CHECK(help.output.find("--cudnn-algo") != std::string::npos);
    CHECK(help.output.find("cudnn.benchmark") != std::string::npos);
  }
}

TEST_CASE("--cudnn-algo search on a GPU device passes the option checks: without a GPU, only the device is refused") {
  if (dpx::cuda::available()) return;  // run on a GPU by tests/cuda/test_conv2d.cpp
  const DpxResult r = run_dpx(kTrain + "--devices cuda:0 --cudnn-algo search");
  CAPTURE(r.output);
  CHECK(r.code != 0);
  CHECK(r.output.find("dpx: error: --cudnn-algo") == std::string::npos);
  CHECK((r.output.find("no usable CUDA device") != std::string::npos || r.output.find("not built") != std::string::npos ||
         r.output.find("without CUDA") != std::string::npos || r.output.find("needs a GPU") != std::string::npos));
}
