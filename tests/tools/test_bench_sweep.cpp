// dpx bench as a study's sweep: every training option a study varies is a list, --repeat runs
// the sweep N times over, results.csv holds one row of medians, confidence intervals, spreads and
// the noisy flag per configuration, runs.csv every run, and bad values exit 2 naming the flag.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "analysis/csv_table.hpp"
#include "../common/files.hpp"
#include "run_dpx.hpp"

using dpx::analysis::CsvTable;

TEST_CASE("bench sweeps algorithms and optimizers three times over: medians with intervals, every run kept") {
  dpx::testing::TempDir dir("bench_sweep");
  DpxResult r = run_dpx("bench --models lenet5 --batch-sizes 8 --devices cpu:1,2 --algo ring,tree "
                        "--optimizer sgd,adamw --repeat 3 --dataset synthetic --image-size 28 --steps 3 --warmup 1 --threads 2 --out " +
                        dir.file("out"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("[24/24] run 3/3") != std::string::npos);  // interleaved: the sweep, three times
  CHECK(r.output.find("lenet5_b8_ddp_tree_adamw_cpu2") != std::string::npos);

  const CsvTable t = CsvTable::read(dir.file("out/results.csv"), "--out");
  REQUIRE(t.rows() == 8);  // 2 device sets x 2 algorithms x 2 optimizers
  for (const char* col : {"scaling", "algo", "optimizer", "bucket_mb", "accumulate", "parallel", "repeats",
                          "images_per_s", "images_per_s_ci_lo", "images_per_s_ci_hi", "images_per_s_spread",
                          "mean_step_s", "mean_step_s_ci_lo", "mean_step_s_ci_hi", "mean_step_s_spread",
                          "mean_forward_s_ci_lo", "mean_comm_total_s_spread", "ci_coverage", "noisy", "speedup"})
    CHECK_MESSAGE(t.has(col), col);
  std::set<std::string> seen;
  for (size_t i = 0; i < t.rows(); ++i) {
    seen.insert(t.text(i, t.column("devices")) + " " + t.text(i, t.column("algo")) + " " +
                t.text(i, t.column("optimizer")));
    CHECK(t.number(i, t.column("repeats")) == 3);
    const double ips = t.number(i, t.column("images_per_s"));
    CHECK(ips > 0);
    CHECK(t.number(i, t.column("images_per_s_ci_lo")) <= ips);
    CHECK(ips <= t.number(i, t.column("images_per_s_ci_hi")));
    const double step = t.number(i, t.column("mean_step_s"));
    CHECK(t.number(i, t.column("mean_step_s_ci_lo")) <= step);
    CHECK(step <= t.number(i, t.column("mean_step_s_ci_hi")));
    const double spread = t.number(i, t.column("images_per_s_spread"));
    CHECK(spread >= 0);
    CHECK(t.number(i, t.column("noisy")) == (spread > 0.10 ? 1 : 0));
    CHECK(t.number(i, t.column("ci_coverage")) == doctest::Approx(0.75));  // [min, max] of 3 runs
  }
  CHECK(seen.size() == 8);

  const CsvTable runs = CsvTable::read(dir.file("out/runs.csv"), "--out");
  CHECK(runs.rows() == 24);
  CHECK(runs.has("run"));
  CHECK(runs.has("optimizer"));
  CHECK(dpx::testing::file_text(dir.file("out/steps/lenet5_b8_ddp_ring_sgd_cpu1_run3.csv")).size() > 0);
}

TEST_CASE("bench with one value of each option keeps today's tags, and writes the columns with one run") {
  dpx::testing::TempDir dir("bench_single");
  DpxResult r = run_dpx("bench --models lenet5 --batch-sizes 8 --devices cpu:1 --algo tree --optimizer adamw "
                        "--dataset synthetic --image-size 28 --steps 2 --warmup 1 --threads 1 --out " +
                        dir.file("out"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(dpx::testing::file_text(dir.file("out/steps/lenet5_b8_ddp_cpu1.csv")).size() > 0);
  const CsvTable t = CsvTable::read(dir.file("out/results.csv"), "--out");
  REQUIRE(t.rows() == 1);
  CHECK(t.text(0, t.column("optimizer")) == "adamw");
  CHECK(t.text(0, t.column("algo")) == "tree");
  CHECK(t.text(0, t.column("images_per_s_ci_lo")) == "");  // no interval below 3 runs
  CHECK(t.number(0, t.column("images_per_s_spread")) == 0);
  CHECK(t.number(0, t.column("noisy")) == 0);
}

TEST_CASE("bench refuses a bad value of every swept flag before running anything, naming the flag") {
  dpx::testing::TempDir dir("bench_refused");
  const std::string out = dir.file("never");  // a refused sweep makes no --out folder
  const std::string quick = "bench --models lenet5 --batch-sizes 8 --devices cpu:1,2 --steps 2 --warmup 1 --out " +
                            out + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--algo ring,bogus", "--algo"},
      {"--optimizer sgd,adam", "--optimizer"},
      {"--bucket-mb 25,-1", "--bucket-mb"},
      {"--bucket-mb 25,x", "--bucket-mb"},
      {"--accumulate 1,0", "--accumulate"},
      {"--scaling weak,sideways", "--scaling"},
      {"--repeat 0", "--repeat"},
      {"--repeat x", "--repeat"},
      {"--noisy-spread -0.1", "--noisy-spread"},
      {"--optimizer sgd,adamw --momentum 0.5", "--momentum"},
      {"--algo ring,tree,ring", "--algo: ring is given twice"},
      {"--bucket-mb 25,25.0", "--bucket-mb: 25 is given twice"},
      {"--grad-dtype fp32,fp8", "--grad-dtype: unknown dtype 'fp8'"},
      {"--grad-dtype bf16,bf16", "--grad-dtype: bf16 is given twice"},
      {"--grad-dtype bf16 --parallel dp", "--grad-dtype bf16: DataParallel"},
      {"--grad-dtype fp16 --loss-scale 0", "--loss-scale"},
      {"--grad-dtype fp32 --initial-loss-scale 1024", "--initial-loss-scale"},
  };
  for (const auto& [flags, flag] : cases) {
    DpxResult r = run_dpx(quick + flags);
    CAPTURE(flags);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(flag) != std::string::npos);
    CHECK(r.output.find("[1/") == std::string::npos);  // not one configuration ran
    CHECK_FALSE(std::filesystem::exists(out));
  }
}

TEST_CASE("bench --help describes the swept flags and the interleaved repeats") {
  DpxResult r = run_dpx("bench --help");
  REQUIRE(r.code == 0);
  for (const char* s : {"--algo", "--bucket-mb", "--accumulate", "--optimizer", "--grad-dtype", "--loss-scale",
                        "--scaling", "--repeat", "--noisy-spread", "interleaved", "runs.csv"})
    CHECK_MESSAGE(r.output.find(s) != std::string::npos, s);
}

TEST_CASE("bench sweeps the gradient all-reduce's dtype: a row and a tag each, fp16 with dynamic loss scaling") {
  dpx::testing::TempDir dir("bench_grad_dtype");
  DpxResult r = run_dpx("bench --models lenet5 --batch-sizes 8 --devices cpu:2 --grad-dtype fp32,bf16,fp16 "
                        "--dataset synthetic --image-size 28 --steps 3 --warmup 1 --threads 2 --out " +
                        dir.file("out"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const CsvTable t = CsvTable::read(dir.file("out/results.csv"), "--out");
  REQUIRE(t.rows() == 3);
  std::set<std::string> seen;
  for (size_t i = 0; i < t.rows(); ++i) {
    seen.insert(t.text(i, t.column("grad_dtype")));
    CHECK(t.number(i, t.column("images_per_s")) > 0);
    // Half the bytes of fp32's all-reduce in half precision (the same buckets, counted).
    const double bytes = t.number(i, t.column("bytes_per_epoch_counted"));
    CHECK(bytes > 0);
  }
  CHECK(seen == std::set<std::string>{"fp32", "bf16", "fp16"});
  for (const char* tag : {"lenet5_b8_ddp_gradfp32_cpu2", "lenet5_b8_ddp_gradbf16_cpu2", "lenet5_b8_ddp_gradfp16_cpu2"})
    CHECK_MESSAGE(dpx::testing::file_text(dir.file(std::string("out/steps/") + tag + ".csv")).size() > 0, tag);
  auto row_of = [&](const std::string& dtype) {
    for (size_t i = 0; i < t.rows(); ++i)
      if (t.text(i, t.column("grad_dtype")) == dtype) return i;
    return t.rows();
  };
  const double fp32 = t.number(row_of("fp32"), t.column("bytes_per_epoch_counted"));
  CHECK(t.number(row_of("bf16"), t.column("bytes_per_epoch_counted")) == doctest::Approx(fp32 / 2).epsilon(0.01));
  CHECK(t.number(row_of("fp16"), t.column("bytes_per_epoch_counted")) == doctest::Approx(fp32 / 2).epsilon(0.01));
  // fp16's loss scale is dynamic by default (auto): its steps file says so.
  const CsvTable steps = CsvTable::read(dir.file("out/steps/lenet5_b8_ddp_gradfp16_cpu2.csv"), "steps");
  REQUIRE(steps.has("loss_scale"));
  CHECK(steps.number(0, steps.column("loss_scale")) > 1);
}

TEST_CASE("bench and train report each run's peak memory: live tensors and what the allocator held") {
  dpx::testing::TempDir dir("bench_memory");
  DpxResult r = run_dpx("bench --models lenet5 --batch-sizes 8,256 --devices cpu:1 --dataset synthetic --image-size 28 "
                        "--steps 2 --warmup 1 --threads 1 --out " + dir.file("out"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("peak MB") != std::string::npos);
  const CsvTable t = CsvTable::read(dir.file("out/results.csv"), "--out");
  REQUIRE(t.rows() == 2);
  auto at = [&](size_t row, const char* col) { return t.number(row, t.column(col)); };
  for (size_t i = 0; i < 2; ++i) {
    // At least the weights and their gradients (lenet5: 61,706 parameters), and one batch of input.
    const double batch = t.number(i, t.column("batch_size"));
    CHECK(at(i, "peak_host_allocated_bytes") > 2 * 61706 * 4 + batch * 28 * 28 * 4);
    CHECK(at(i, "peak_host_reserved_bytes") >= at(i, "peak_host_allocated_bytes"));
    CHECK(at(i, "peak_device_allocated_bytes") == 0);  // no GPU
    CHECK(at(i, "peak_device_reserved_bytes") == 0);
  }
  // 248 more images of activations: lenet5 keeps over 10 KB per image for backward. Each
  // configuration counts from its own start, not the earlier one's.
  CHECK(at(1, "peak_host_allocated_bytes") > at(0, "peak_host_allocated_bytes") + 248 * 10000);

  DpxResult train = run_dpx("train --model lenet5 --dataset synthetic --image-size 28 --steps 3 --devices cpu:2 "
                            "--parallel ddp --no-eval");
  CAPTURE(train.output);
  REQUIRE(train.code == 0);
  CHECK(train.output.find("peak memory of the process (its ranks together): host ") != std::string::npos);
  CHECK(train.output.find(" MB reserved (held by dpx's allocator)") != std::string::npos);
}

// A configuration's peaks are its own: the models of the configurations before it are gone by then
// (the reports dpx bench keeps for its tables held each trained model to the sweep's end, and a
// GPU sweep's later models were charged every earlier one's weights and gradients).
TEST_CASE("bench: a configuration after another peaks as it does alone, without the earlier model") {
  dpx::testing::TempDir dir("bench_memory_alone");
  auto lenet5_peaks = [&](const std::string& models) {
    const std::string out = dir.file(models);
    DpxResult r = run_dpx("bench --models " + models + " --batch-sizes 8 --devices cpu:1 --dataset synthetic " +
                          "--image-size 28 --steps 2 --warmup 1 --threads 1 --out " + out);
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    const CsvTable t = CsvTable::read(out + "/results.csv", "--out");
    const size_t row = t.rows() - 1;
    REQUIRE(t.text(row, t.column("model")) == "lenet5");
    return std::pair{t.number(row, t.column("peak_host_allocated_bytes")),
                     t.number(row, t.column("peak_host_reserved_bytes"))};
  };
  const auto alone = lenet5_peaks("lenet5");
  const auto after = lenet5_peaks("mlp,lenet5");  // mlp at 1x28x28: 235,146 parameters, 0.94 MB
  // The same bytes in every run seen (2026-11-29); a margin of a few of the loader's batches (25 KB
  // each) in case their timing differs, far below mlp's weights and gradients (1.88 MB).
  const double margin = 256 * 1024;
  CHECK(after.first <= alone.first + margin);
  CHECK(after.second <= alone.second + margin);
}

TEST_CASE("a sweep into a folder that holds an earlier run is refused; --force moves that run aside") {
  dpx::testing::TempDir dir("bench_again");
  const std::string common = "bench --models lenet5 --devices cpu:1 --dataset synthetic --image-size 28 --steps 2 "
                             "--warmup 1 --threads 1 --out " + dir.file("out");
  REQUIRE(run_dpx(common + " --batch-sizes 8").code == 0);
  REQUIRE(std::filesystem::exists(dir.file("out/steps/lenet5_b8_ddp_cpu1.csv")));
  std::ofstream(dir.file("out/steps/notes.csv")) << "mine\n";  // not dpx's: stays where it is
  const std::string first_results = dpx::testing::file_text(dir.file("out/results.csv"));

  // Without --force: refused before anything runs, naming the earlier command; nothing changes.
  DpxResult refused = run_dpx(common + " --batch-sizes 4");
  CAPTURE(refused.output);
  CHECK(refused.code == 2);
  CHECK(refused.output.find("holds an earlier dpx bench run") != std::string::npos);
  CHECK(refused.output.find("--batch-sizes 8") != std::string::npos);  // its command
  CHECK(refused.output.find("--force") != std::string::npos);
  CHECK(dpx::testing::file_text(dir.file("out/results.csv")) == first_results);
  CHECK(!std::filesystem::exists(dir.file("out/steps/lenet5_b4_ddp_cpu1.csv")));

  // With --force: the earlier run's files go to out.old-1, nothing is deleted, and the folder
  // holds this run alone (dpx plot would have drawn the old steps under the new command).
  DpxResult forced = run_dpx(common + " --batch-sizes 4 --force");
  CAPTURE(forced.output);
  REQUIRE(forced.code == 0);
  CHECK(forced.output.find("moved the earlier run") != std::string::npos);
  CHECK(std::filesystem::exists(dir.file("out/steps/lenet5_b4_ddp_cpu1.csv")));
  CHECK(!std::filesystem::exists(dir.file("out/steps/lenet5_b8_ddp_cpu1.csv")));
  CHECK(std::filesystem::exists(dir.file("out.old-1/steps/lenet5_b8_ddp_cpu1.csv")));
  CHECK(dpx::testing::file_text(dir.file("out.old-1/results.csv")) == first_results);
  CHECK(std::filesystem::exists(dir.file("out.old-1/command.txt")));
  CHECK(dpx::testing::file_text(dir.file("out/steps/notes.csv")) == "mine\n");
  // Again: the next free name.
  REQUIRE(run_dpx(common + " --batch-sizes 8 --force").code == 0);
  CHECK(std::filesystem::exists(dir.file("out.old-2/steps/lenet5_b4_ddp_cpu1.csv")));
}

// A busy machine is noticed (core/cpu_use.hpp): with a busy loop on every core beside it, the run
// is marked disturbed in results.csv and in the table, and train's summary says so.
TEST_CASE("bench on a busy machine marks the configuration disturbed, with the share other processes took") {
  dpx::testing::TempDir dir("bench_busy");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<pid_t> spinners;
  for (int i = 0; i < cores; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      volatile unsigned long x = 0;
      for (;;) x = x + 1;
    }
    spinners.push_back(pid);
  }
  DpxResult r = run_dpx("bench --models lenet5 --batch-sizes 16 --devices cpu:1 --dataset synthetic --image-size 28 "
                        "--steps 150 --warmup 2 --threads 1 --out " + dir.file("out"));
  DpxResult t = run_dpx("train --model lenet5 --dataset synthetic --image-size 28 --batch-size 16 --steps 150 "
                        "--epochs 1 --threads 1 --no-eval");
  for (pid_t pid : spinners) kill(pid, SIGKILL);
  for (pid_t pid : spinners) waitpid(pid, nullptr, 0);
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const CsvTable csv = CsvTable::read(dir.file("out/results.csv"), "--out");
  REQUIRE(csv.rows() == 1);
  CHECK(csv.number(0, csv.column("other_cpu_share")) > 0.3);
  CHECK(csv.number(0, csv.column("disturbed")) == 1);
  CHECK(r.output.find("%!\n") != std::string::npos);  // the table's others column, flagged
  // The report says how many configurations ran disturbed (it draws with gnuplot, when installed).
  if (run_command("command -v gnuplot").code == 0) {
    DpxResult page = run_dpx("report " + dir.file("out") + " --out " + dir.file("page.html"));
    CAPTURE(page.output);
    REQUIRE(page.code == 0);
    const std::string html = dpx::testing::file_text(dir.file("page.html"));
    CHECK(html.find("<th>others</th>") != std::string::npos);
    CHECK(html.find(" % disturbed</td>") != std::string::npos);
    CHECK(html.find("<strong>1 of 1 configurations ran disturbed</strong>") != std::string::npos);
    // The throughput figure rings the point, with the ring in its legend.
    DpxResult fig = run_dpx("plot " + dir.file("out") + " --figure throughput --out " + dir.file("figs"));
    CAPTURE(fig.output);
    REQUIRE(fig.code == 0);
    CHECK(dpx::testing::file_text(dir.file("figs/throughput.svg")).find("disturbed: other processes took > 10 % of its cores") !=
          std::string::npos);
  }
  CAPTURE(t.output);
  CHECK(t.code == 0);
  CHECK(t.output.find("(disturbed)") != std::string::npos);
  CHECK(t.output.find("dpx: warning: other processes took ") != std::string::npos);
}

// --append: more repeats of the same sweep into its folder; results.csv is then over every run.
TEST_CASE("bench --append adds repeats of the same sweep; another sweep or --force with it is refused") {
  dpx::testing::TempDir dir("bench_append");
  const std::string sweep = "bench --models lenet5 --batch-sizes 8 --devices cpu:1,2 --dataset synthetic --image-size 28 "
                            "--steps 3 --warmup 1 --threads 1 --out " + dir.file("out");
  REQUIRE(run_dpx(sweep).code == 0);  // one run
  DpxResult more = run_dpx(sweep + " --repeat 2 --append");
  CAPTURE(more.output);
  REQUIRE(more.code == 0);
  CHECK(more.output.find("run 3/3") != std::string::npos);
  const CsvTable runs = CsvTable::read(dir.file("out/runs.csv"), "runs");
  REQUIRE(runs.rows() == 6);  // 2 configurations x 3 runs, in the sweep's order
  CHECK(runs.text(0, runs.column("run")) == "1");
  CHECK(runs.text(5, runs.column("run")) == "3");
  const CsvTable results = CsvTable::read(dir.file("out/results.csv"), "results");
  REQUIRE(results.rows() == 2);
  CHECK(results.text(0, results.column("repeats")) == "3");
  CHECK(!results.text(0, results.column("images_per_s_ci_lo")).empty());  // an interval from 3 runs
  // The first run's steps file took the run number the others have.
  for (int run = 1; run <= 3; ++run)
    CHECK(std::filesystem::exists(dir.file("out/steps/lenet5_b8_ddp_cpu2_run" + std::to_string(run) + ".csv")));
  CHECK(!std::filesystem::exists(dir.file("out/steps/lenet5_b8_ddp_cpu2.csv")));
  // Another sweep, --force with it, or nothing to add to: refused, nothing changed.
  const std::string before = dpx::testing::file_text(dir.file("out/runs.csv"));
  DpxResult other = run_dpx(sweep + " --batch-sizes 16 --append");
  CHECK(other.code == 2);
  CHECK(other.output.find("--append adds repeats of the same sweep") != std::string::npos);
  DpxResult both = run_dpx(sweep + " --append --force");
  CHECK(both.code == 2);
  CHECK(both.output.find("pass one of them") != std::string::npos);
  DpxResult none = run_dpx("bench --models lenet5 --batch-sizes 8 --devices cpu:1 --dataset synthetic --image-size 28 "
                           "--steps 3 --warmup 1 --append --out " + dir.file("fresh"));
  CHECK(none.code == 2);
  CHECK(none.output.find("holds no earlier dpx bench run") != std::string::npos);
  CHECK(dpx::testing::file_text(dir.file("out/runs.csv")) == before);
}

// --append with --profile-ops: ops.csv keeps the earlier runs' rows and adds the new ones'.
TEST_CASE("bench --append keeps the earlier runs' op profile") {
  dpx::testing::TempDir dir("bench_append_ops");
  const std::string sweep = "bench --models lenet5 --batch-sizes 8 --devices cpu:1 --dataset synthetic --image-size 28 "
                            "--steps 3 --warmup 1 --threads 1 --profile-ops --out " + dir.file("out");
  REQUIRE(run_dpx(sweep).code == 0);
  DpxResult more = run_dpx(sweep + " --append");
  CAPTURE(more.output);
  REQUIRE(more.code == 0);
  const CsvTable ops = CsvTable::read(dir.file("out/ops.csv"), "ops");
  int first = 0, second = 0;
  for (size_t r = 0; r < ops.rows(); ++r) {
    first += ops.text(r, ops.column("run")) == "1";
    second += ops.text(r, ops.column("run")) == "2";
  }
  CHECK(first > 0);
  CHECK(first == second);  // the same ops, once per run
}
