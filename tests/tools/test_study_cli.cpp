// dpx study end to end: the quick devices study runs its sweep and draws its figures (the
// throughput figure, and the phases and efficiency figures per model and batch) into a new folder
// with the commands that remake it; the quick collectives study writes one CSV per pattern;
// careless use (an unknown study, an --out that holds files, a failing step) exits non-zero with a
// message naming what to change, and touches no existing file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "analysis/csv_table.hpp"
#include "analysis/gnuplot.hpp"
#include "../common/files.hpp"
#include "run_dpx.hpp"

namespace fs = std::filesystem;

namespace {


bool has_gnuplot() { return !dpx::analysis::find_executable("gnuplot").empty(); }

}  // namespace

TEST_CASE("dpx study --list and --dry-run name the studies and their commands") {
  DpxResult l = run_dpx("study --list");
  CAPTURE(l.output);
  CHECK(l.code == 0);
  for (const char* name : {"devices:", "dp-vs-ddp:", "frozen-backbone:", "accumulation:", "loading:", "collectives:"})
    CHECK(l.output.find(name) != std::string::npos);
  DpxResult d = run_dpx("study devices --quick --dry-run --max-devices 4");
  CAPTURE(d.output);
  CHECK(d.code == 0);
  CHECK(d.output.find("dpx bench ") == 0);
  CHECK(d.output.find("--devices cpu:1,2,4 ") != std::string::npos);
  CHECK(d.output.find("--repeat 3") != std::string::npos);
  DpxResult c = run_dpx("study collectives --dry-run --max-devices 3");
  CHECK(c.code == 0);
  CHECK(c.output.find("--ranks 3") != std::string::npos);
  CHECK(c.output.find("-t all_to_all") != std::string::npos);
}

TEST_CASE("dpx study devices --quick: the sweep, its figures and the commands that remake them") {
  dpx::testing::TempDir dir("study");
  const fs::path out = dir.path / "devices";
  DpxResult r = run_dpx("study devices --quick --max-devices 2 --out " + out.string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const std::string results = dpx::testing::file_text(out / "bench" / "results.csv");
  CHECK(results.find("lenet5,synthetic,cpu:2") != std::string::npos);
  CHECK(results.find("squeezenet1_1,synthetic,cpu:1") != std::string::npos);
  const std::string sh = dpx::testing::file_text(out / "commands.sh");
  CHECK(sh.find("dpx bench --models lenet5,squeezenet1_1") != std::string::npos);
  CHECK(fs::exists(out / "bench" / "command.txt"));
  if (has_gnuplot()) {
    CHECK(sh.find("dpx plot bench --out figures") != std::string::npos);
    CHECK(fs::file_size(out / "figures" / "throughput.png") > 1000);
    CHECK(sh.find("dpx report bench --out report.html --title 'dpx study devices --quick'") != std::string::npos);
    const std::string page = dpx::testing::file_text(out / "report.html");
    CHECK(page.find("<meta name=\"generator\" content=\"dpx report\">") != std::string::npos);
    CHECK(page.find("dpx study devices --quick") != std::string::npos);
    CHECK(page.find("<strong>The question:</strong> throughput, step phases and scaling efficiency against devices") <
          page.find("<h2>What the runs show</h2>"));
    CHECK(page.find("<svg") != std::string::npos);
    for (const char* fig : {"best-devices", "bytes-per-epoch", "loss", "weak-strong-lenet5", "weak-strong-squeezenet1_1"})
      CHECK(fs::exists(out / "figures" / (std::string(fig) + ".svg")));
    for (const std::string m : {"lenet5", "squeezenet1_1"})
      for (const std::string b : {"16", "32", "64"})
        for (const std::string s : {"weak", "strong"})  // weak and strong apart
          for (const std::string fig : {"phases-", "efficiency-", "comm-compute-"}) {
            CAPTURE(fig + m + "-b" + b + "-" + s);
            CHECK(fs::exists(out / "figures" / (fig + m + "-b" + b + "-" + s + ".svg")));
          }
  } else {
    MESSAGE("gnuplot is not installed: the figures were not checked");
    CHECK(r.output.find("no gnuplot") != std::string::npos);
  }
}

TEST_CASE("dpx study loading --quick: an image folder made, a sweep of loader workers, the loading figures") {
  dpx::testing::TempDir dir("study");
  const fs::path out = dir.path / "loading";
  DpxResult r = run_dpx("study loading --quick --max-devices 1 --out " + out.string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const std::string sh = dpx::testing::file_text(out / "commands.sh");
  CHECK(sh.find("dpx data make-imagefolder data --classes 4 --per-class 48 ") != std::string::npos);
  CHECK(sh.find("--dataset imagefolder --data-dir data") != std::string::npos);
  CHECK(fs::exists(out / "data" / "train"));
  // One row per batch size and number of workers, each with the loader's own rate.
  const std::string results = dpx::testing::file_text(out / "bench" / "results.csv");
  CHECK(results.find(",workers,loader_images_per_worker_s,") != std::string::npos);
  const dpx::analysis::CsvTable t = dpx::analysis::CsvTable::read((out / "bench" / "results.csv").string(), "--out");
  std::set<std::string> workers;
  for (size_t r = 0; r < t.rows(); ++r) {
    workers.insert(t.text(r, t.column("workers")));
    CHECK(t.number(r, t.column("loader_images_per_worker_s")) > 0);
  }
  CHECK(workers == std::set<std::string>{"0", "1", "2"});
  if (has_gnuplot()) {
    CHECK(sh.find("dpx plot bench --out figures") != std::string::npos);  // the data folder is not drawn
    for (const char* fig : {"loading-squeezenet1_1-b16", "loading-squeezenet1_1-b32", "phases-squeezenet1_1-b16-w2"})
      CHECK(fs::file_size(out / "figures" / (std::string(fig) + ".png")) > 1000);
    CHECK(dpx::testing::file_text(out / "report.html").find("figure-loading-squeezenet1_1-b32") != std::string::npos);
  }
}

TEST_CASE("dpx study collectives --quick writes one CSV per pattern") {
  dpx::testing::TempDir dir("study");
  const fs::path out = dir.path / "c";
  DpxResult r = run_dpx("study collectives --quick --max-devices 2 --out " + out.string() + " --gnuplot /nonexistent");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  for (const char* t : {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all"})
    CHECK(dpx::testing::file_text(out / (std::string(t) + ".csv")).find(t) != std::string::npos);
  CHECK(r.output.find("no gnuplot (/nonexistent)") != std::string::npos);
}

TEST_CASE("dpx study refuses careless use with a clear message") {
  dpx::testing::TempDir dir("study");
  DpxResult none = run_dpx("study");
  CHECK(none.code == 2);
  CHECK(none.output.find("name a study") != std::string::npos);
  DpxResult bad = run_dpx("study devicez --quick");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("no study named 'devicez'") != std::string::npos);
  DpxResult neg = run_dpx("study devices --max-devices -1");
  CHECK(neg.code == 2);
  CHECK(neg.output.find("--max-devices") != std::string::npos);
  // More ranks than the runs take is refused before anything is written.
  const fs::path huge = dir.path / "huge";
  DpxResult big = run_dpx("study collectives --quick --max-devices 100000 --out " + huge.string());
  CHECK(big.code == 2);
  CHECK(big.output.find("give 1 to 1024") != std::string::npos);
  CHECK(!fs::exists(huge));

  // An --out that holds someone's files is left alone.
  const fs::path taken = dir.path / "taken";
  fs::create_directories(taken);
  std::ofstream(taken / "notes.txt") << "mine";
  DpxResult t = run_dpx("study collectives --quick --out " + taken.string());
  CAPTURE(t.output);
  CHECK(t.code == 2);
  CHECK(t.output.find("exists and is not an empty folder") != std::string::npos);
  CHECK(dpx::testing::file_text(taken / "notes.txt") == "mine");
  CHECK(!fs::exists(taken / "commands.sh"));

  // A step that fails (no Fashion-MNIST where the data is said to be) stops the study, naming it.
  const fs::path empty = dir.path / "no-data";
  fs::create_directories(empty);
  DpxResult f = run_command("DPX_DATA_DIR=" + empty.string() + " " + DPX_BINARY +
                            " study frozen-backbone --quick --max-devices 1 --out " + (dir.path / "fb").string());
  CAPTURE(f.output);
  CHECK(f.code == 1);
  CHECK(f.output.find("step 1 failed") != std::string::npos);
  CHECK(f.output.find("dpx bench --models squeezenet1_1,resnet18") != std::string::npos);
}
