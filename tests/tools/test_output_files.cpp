// Files dpx did not make are never changed (issue "Safe with anyone's files", class 2), end to end:
// an empty output path, an output that names an input of the same run, and an existing file that
// is not dpx's own kind (a user's notes, a file of another kind, a FIFO) are refused with exit 2,
// naming the flag, and the file is left byte for byte; --force replaces a user's file; a second
// run into dpx's own outputs needs no --force; a failed run leaves the old output whole; checkpoint
// rotation removes only dpx's checkpoints. Seen failing before: --trace over --weights replaced the
// weights, --save/--trace/--csv replaced users' files, predict emptied its --csv before reading
// --compare, and a user's checkpoint-N.safetensors was deleted by the rotation.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "analysis/gnuplot.hpp"
#include "core/quote.hpp"
#include "run_dpx.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::file_text;
using dpx::testing::TempDir;

namespace {

const std::string kTrainAnySteps = "train --model mlp --dataset synthetic --image-size 8 --channels 1 "
                                   "--synthetic-size 128 --batch-size 16 --warmup 0 --no-eval --threads 1 --workers 0 ";
const std::string kTrain = kTrainAnySteps + "--steps 2 ";
const std::string kMine = "my own notes, not dpx's\n";

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// `args` is refused with exit 2 and a message holding `needle`; `kept` files are unchanged.
void refused(const std::string& args, const std::string& needle, const std::vector<std::string>& kept) {
  std::vector<std::string> before;
  for (const auto& k : kept) before.push_back(file_text(k));
  const DpxResult r = run_dpx(args);
  CAPTURE(args);
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("dpx: error: ") != std::string::npos);
  CHECK(r.output.find(needle) != std::string::npos);
  for (size_t i = 0; i < kept.size(); ++i) {
    CAPTURE(kept[i]);
    CHECK(file_text(kept[i]) == before[i]);
  }
}

void ok(const std::string& args) {
  const DpxResult r = run_dpx(args);
  CAPTURE(args);
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
}

}  // namespace

TEST_CASE("an empty output path is refused, naming the flag, before anything is written") {
  TempDir dir("out_empty");
  for (const std::string& args : std::vector<std::string>{
           "bench --models mlp --batch-sizes 8 --dataset synthetic --image-size 8 --channels 1 --steps 1 --warmup 0 "
        "--devices cpu:1 --out ''",
        kTrain + "--out ''", kTrain + "--trace ''", kTrain + "--save ''", kTrain + "--checkpoint-dir ''",
        std::string("collective -b 1K -e 1K -n 1 -w 0 --csv ''"), std::string("models mlp --csv ''"),
        std::string("plot x --out ''"), std::string("report x --out ''")}) {
    CAPTURE(args);
    const DpxResult r = run_command("cd " + dpx::shell_quote(dir.path.string()) + " && " + DPX_BINARY + " " + args);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("empty") != std::string::npos);
    CHECK(dir.entries().empty());
  }
}

TEST_CASE("an output that names an input of the same run, or another output, is refused; the input is kept") {
  TempDir dir("out_input");
  const std::string w = dir.file("w.safetensors");
  ok(kTrain + "--save " + w);
  refused(kTrain + "--weights " + w + " --trace " + w, "--trace '" + w + "' is the file --weights reads", {w});
  refused(kTrain + "--weights " + w + " --save " + dir.file("./w.safetensors"), "is the file --weights reads", {w});
  refused(kTrain + "--out " + dir.path.string() + " --trace " + dir.file("steps.csv"),
          "are the same file: one output would replace the other", {});
  // predict --csv X --compare X: X is read, never emptied.
  ok("bench --models mlp --batch-sizes 8 --devices cpu:1 --dataset synthetic --image-size 8 --channels 1 --steps 2 "
     "--warmup 1 --out " + dir.file("b"));
  const std::string results = dir.file("b/results.csv");
  refused("predict --model mlp --link 10gbit,5us --compare " + results + " --csv " + results,
          "--csv '" + results + "' is the file --compare reads", {results});
}

TEST_CASE("an existing file that dpx did not write is refused unless --force, and kept byte for byte") {
  TempDir dir("out_foreign");
  const std::string notes = dir.file("notes.txt");
  write(notes, kMine);
  refused(kTrain + "--save " + notes, "--save '" + notes + "' exists and is not a safetensors file written by dpx",
          {notes});
  refused(kTrain + "--trace " + notes, "is not a dpx trace", {notes});
  refused("collective -b 1K -e 1K -n 1 -w 0 --csv " + notes, "is not a dpx collective CSV file", {notes});
  refused("models mlp --csv " + notes, "is not a dpx models CSV file", {notes});
  // A file of another dpx kind is not this kind: a collective CSV is no models CSV.
  const std::string coll = dir.file("c.csv");
  ok("collective -b 1K -e 1K -n 1 -w 0 --csv " + coll);
  refused("models mlp --csv " + coll, "is not a dpx models CSV file", {coll});
  // A user's summary.csv in --out, and a user's figure in plot's --out.
  fs::create_directories(dir.file("run"));
  write(dir.file("run/summary.csv"), kMine);
  refused(kTrain + "--out " + dir.file("run"), "--out '" + dir.file("run/summary.csv") + "' exists", {dir.file("run/summary.csv")});
  if (!dpx::analysis::find_executable("gnuplot").empty()) {
    fs::create_directories(dir.file("figs"));
    write(dir.file("figs/throughput.png"), kMine);
    ok("bench --models mlp --batch-sizes 8 --devices cpu:1 --dataset synthetic --image-size 8 --channels 1 --steps 2 "
       "--warmup 1 --out " + dir.file("b"));
    refused("plot " + dir.file("b") + " --out " + dir.file("figs"), "throughput.png' exists and is not a dpx plot figure",
            {dir.file("figs/throughput.png")});
    ok("plot " + dir.file("b") + " --out " + dir.file("figs") + " --force");
    CHECK(file_text(dir.file("figs/throughput.png")) != kMine);
  }
  // --force replaces it (a user's own decision), and a link is replaced, never its target.
  ok("models mlp --csv " + notes + " --force");
  CHECK(file_text(notes).rfind("model,family,", 0) == 0);
  const std::string target = dir.file("target.txt"), link = dir.file("link.csv");
  write(target, kMine);
  fs::create_symlink(target, link);
  refused("models mlp --csv " + link, "is a symbolic link", {target});
  ok("models mlp --csv " + link + " --force");
  CHECK(file_text(target) == kMine);
  CHECK(!fs::is_symlink(link));
  // A FIFO, a folder: refused at once (no wait on the FIFO), with or without --force.
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  refused("models mlp --csv " + dir.file("fifo") + " --force", "is not a regular file", {});
  refused("models mlp --csv " + dir.path.string(), "is a folder", {});
}

TEST_CASE("dpx's own outputs are replaced without --force: a second run into the same place") {
  TempDir dir("out_again");
  const std::string run = kTrain + "--out " + dir.file("run") + " --trace " + dir.file("t.json") + " --save " +
                          dir.file("w.safetensors");
  ok(run);
  ok(run);
  const std::string bench = "bench --models mlp --batch-sizes 8 --devices cpu:1 --dataset synthetic --image-size 8 "
                            "--channels 1 --steps 2 --warmup 1 --profile-ops --out " + dir.file("b");
  ok(bench);
  // A bench folder holds one run: the second is refused, or with --force moves the first aside
  // (tests/tools/test_bench_sweep.cpp).
  ok(bench + " --force");
  for (const std::string& again : std::vector<std::string>{
           // a simulated network: times a fit describes (a real one on a busy machine may not fit)
           "collective -t all_reduce --algo ring --ranks 2 -b 64K -e 4M -f 4 -n 3 -w 1 --net-sim 100MB,5ms --csv " +
               dir.file("c.csv"),
                                   "models mlp --csv " + dir.file("m.csv"),
                                   "fit " + dir.file("c.csv") + " --out " + dir.file("fit.json")}) {
    ok(again);
    ok(again);
  }
  if (!dpx::analysis::find_executable("gnuplot").empty()) {
    ok("plot " + dir.file("b") + " --out " + dir.file("figs"));
    ok("plot " + dir.file("b") + " --out " + dir.file("figs"));
    ok("report " + dir.file("b") + " --out " + dir.file("r.html"));
    ok("report " + dir.file("b") + " --out " + dir.file("r.html"));
  }
}

TEST_CASE("a failed predict leaves its existing --csv whole") {
  TempDir dir("out_failed");
  const std::string csv = dir.file("p.csv");
  ok("predict --model mlp --link 10gbit,5us --ranks 1..2 --batch-size 8 --image-size 8 --csv " + csv);
  const std::string before = file_text(csv);
  REQUIRE(before.rfind("model,algo,scaling,batch,", 0) == 0);
  // A run that fails after the flags were read (a --compare file that is not a bench results.csv).
  write(dir.file("foreign.csv"), "a,b\n1,2\n");
  const DpxResult r = run_dpx("predict --model mlp --link 10gbit,5us --ranks 1..2 --batch-size 8 --image-size 8 "
                              "--compare " + dir.file("foreign.csv") + " --csv " + csv);
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(file_text(csv) == before);
}

TEST_CASE("checkpoint rotation removes only dpx's checkpoints; a stray checkpoint name is no crash") {
  TempDir dir("out_ckpt");
  const std::string ck = dir.file("ck");
  fs::create_directories(ck);
  const std::string users = ck + "/checkpoint-000000099.safetensors";  // a step this run does not reach
  write(users, kMine);
  write(ck + "/checkpoint-99999999999999999999999.safetensors", kMine);  // does not fit in 64 bits
  ok(kTrainAnySteps + "--steps 3 --checkpoint-dir " + ck + " --checkpoint-every 1 --keep 1");
  CHECK(file_text(users) == kMine);
  CHECK(file_text(ck + "/checkpoint-99999999999999999999999.safetensors") == kMine);
  // dpx's own older checkpoints were rotated away: its newest alone is left beside the user's files.
  int dpx_checkpoints = 0;
  for (const auto& e : fs::directory_iterator(ck)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("checkpoint-", 0) == 0 && file_text(e.path()) != kMine) ++dpx_checkpoints;
  }
  CHECK(dpx_checkpoints == 1);
}
