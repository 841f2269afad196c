// dpx bench --profile-ops: a table of every op's time per run, and ops.csv in --out, over the
// measured steps only (the warmup left out); no ops.csv without the flag.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <string>

#include "analysis/csv_table.hpp"
#include "../common/files.hpp"
#include "run_dpx.hpp"

using dpx::analysis::CsvTable;

TEST_CASE("bench --profile-ops writes ops.csv with the convolutions' calls and GFLOP/s; without it, none") {
  dpx::testing::TempDir dir("bench_profile");
  const std::string common = "bench --models lenet5 --batch-sizes 4 --devices cpu:1,2 --dataset synthetic "
                             "--image-size 28 --steps 3 --warmup 1 --threads 2 --out " + dir.file("out");
  DpxResult r = run_dpx(common + " --profile-ops");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("GFLOP/s") != std::string::npos);
  CHECK(r.output.find("conv2d_forward") != std::string::npos);
  CHECK(r.output.find("/ops.csv") != std::string::npos);

  const CsvTable t = CsvTable::read(dir.file("out/ops.csv"), "--out");
  for (const char* col : {"configuration", "run", "op", "calls", "total_ms", "ms_per_step", "percent_of_step", "gflops"})
    CHECK_MESSAGE(t.has(col), col);
  std::map<std::string, double> conv_calls;  // configuration -> conv2d_forward's calls
  double percent_cpu1 = 0;
  for (size_t i = 0; i < t.rows(); ++i) {
    const std::string config = t.text(i, t.column("configuration")), op = t.text(i, t.column("op"));
    CHECK(t.number(i, t.column("run")) == 1);
    CHECK(t.number(i, t.column("calls")) > 0);
    CHECK(t.number(i, t.column("total_ms")) >= 0);
    if (config == "lenet5_b4_ddp_cpu1") percent_cpu1 += t.number(i, t.column("percent_of_step"));
    if (op == "conv2d_forward") {
      conv_calls[config] = t.number(i, t.column("calls"));
      CHECK(t.number(i, t.column("gflops")) > 0);
      CHECK(t.number(i, t.column("ms_per_step")) > 0);
    }
    if (op == "relu_forward") CHECK(t.text(i, t.column("gflops")).empty());  // no FLOPs defined
  }
  // LeNet-5 has two convolutions; 2 measured steps (3 minus 1 warmup) on each of 1 and 2 ranks.
  CHECK(conv_calls["lenet5_b4_ddp_cpu1"] == 2 * 2);
  CHECK(conv_calls["lenet5_b4_ddp_cpu2"] == 2 * 2 * 2);
  // The ops are a part of the measured step time (they do not all fit in it when it is wrong).
  CHECK(percent_cpu1 > 0);
  CHECK(percent_cpu1 <= 100);
  // The op during which the measured steps' live host tensors reached their most: one of the
  // profiled ops (the warm-up step's own high-water mark does not hide it).
  const size_t mark = r.output.find("memory high-water mark of the measured steps: ");
  REQUIRE(mark != std::string::npos);
  const size_t in = r.output.find(" MB of live host tensors in use, reached in ", mark);
  REQUIRE(in != std::string::npos);
  const size_t name_at = in + std::string(" MB of live host tensors in use, reached in ").size();
  const std::string peak_op = r.output.substr(name_at, r.output.find('\n', name_at) - name_at);
  CAPTURE(peak_op);
  bool profiled = false;
  for (size_t i = 0; i < t.rows(); ++i) profiled = profiled || t.text(i, t.column("op")) == peak_op;
  CHECK(profiled);

  // The same sweep without the flag leaves no ops.csv behind, not even the earlier one (--force
  // moves the earlier run aside: bench_out.hpp).
  r = run_dpx(common + " --force");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(!std::filesystem::exists(dir.file("out/ops.csv")));
  CHECK(r.output.find("GFLOP/s") == std::string::npos);
}

TEST_CASE("bench --help documents --profile-ops and --profile-shapes") {
  DpxResult r = run_dpx("bench --help");
  REQUIRE(r.code == 0);
  CHECK(r.output.find("--profile-ops") != std::string::npos);
  CHECK(r.output.find("--profile-shapes") != std::string::npos);
}

// --profile-shapes turns the profiler on and counts each op per call shape: LeNet-5's two
// convolutions are two rows of conv2d_forward, each named by its tensors and parameters.
TEST_CASE("bench and train --profile-shapes: a row per op and shape in ops.csv") {
  dpx::testing::TempDir dir("bench_shapes");
  DpxResult r = run_dpx("bench --models lenet5 --batch-sizes 4 --devices cpu:1 --dataset synthetic --image-size 28 "
                        "--steps 3 --warmup 1 --profile-shapes --out " + dir.file("out"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("kernels  shape") != std::string::npos);
  const CsvTable t = CsvTable::read(dir.file("out/ops.csv"), "--out");
  REQUIRE(t.has("shape"));
  std::map<std::string, double> conv;  // shape -> calls
  for (size_t i = 0; i < t.rows(); ++i) {
    CHECK(!t.text(i, t.column("shape")).empty());
    if (t.text(i, t.column("op")) == "conv2d_forward") conv[t.text(i, t.column("shape"))] = t.number(i, t.column("calls"));
  }
  // y, x, w, bias; dpx's LeNet-5 has two 5x5 convolutions of padding 2: 1 -> 6 channels and 6 -> 16.
  CHECK(conv.size() == 2);
  CHECK(conv["4x6x28x28 4x1x28x28 6x1x5x5 6 s1x1 p2x2 d1x1 g1"] == 2);
  CHECK(conv["4x16x14x14 4x6x14x14 16x6x5x5 16 s1x1 p2x2 d1x1 g1"] == 2);

  r = run_dpx("train --model lenet5 --dataset synthetic --synthetic-size 64 --batch-size 8 --steps 3 --warmup 1 "
              "--no-eval --profile-shapes --out " + dir.file("train"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const CsvTable tr = CsvTable::read(dir.file("train/ops.csv"), "--out");
  int conv_rows = 0;
  for (size_t i = 0; i < tr.rows(); ++i) conv_rows += tr.text(i, tr.column("op")) == "conv2d_forward";
  CHECK(conv_rows == 2);
}
