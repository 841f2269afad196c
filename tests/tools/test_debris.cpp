// Children die with their parent; temporaries with the run (issue "Safe with anyone's files",
// class 5). A signal to dpx study, plot or report (as a scheduler sends it: to dpx's process alone)
// reaches the child they run (a dpx step, gnuplot), which ends too, and their scratch folders go
// with them; a file over `ulimit -f` ends the write with a message, not SIGXFSZ's core dump, and
// leaves no temporary. Seen failing before: the study's bench step kept running orphaned, report's
// $TMPDIR/dpx-report.PID.N and plot's temporaries stayed, SIGXFSZ killed dpx mid-write.
#include <doctest/doctest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/quote.hpp"
#include "mpi_run.hpp"
#include "run_dpx.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::file_text;
using dpx::testing::TempDir;

namespace {

bool alive(int pid) { return pid > 0 && ::kill(pid, 0) == 0 && file_text("/proc/" + std::to_string(pid) + "/stat").find(") Z ") == std::string::npos; }

// A stand-in for gnuplot that writes its pid, then sleeps: dpx is then stopped while it "draws".
std::string sleepy_gnuplot(const TempDir& dir) {
  const std::string path = dir.file("slow-gnuplot");
  dpx::testing::write_executable(
      path, "#!/bin/sh\necho $$ > " + dpx::shell_quote(dir.file("gnuplot.pid")) + "\nexec sleep 60\n");
  return path;
}

int wait_for_pid_file(const std::string& path, double timeout_s) {
  for (auto t = std::chrono::steady_clock::now(); seconds_since(t) < timeout_s;) {
    const std::string text = file_text(path);
    if (!text.empty() && text.back() == '\n') return std::stoi(text);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

// A small bench folder to draw.
std::string bench_folder(const TempDir& dir) {
  const std::string out = dir.file("bench");
  const DpxResult b = run_dpx("bench --models mlp --batch-sizes 8 --devices cpu:1 --dataset synthetic --image-size 8 "
                              "--channels 1 --steps 2 --warmup 1 --threads 1 --workers 0 --out " + out);
  REQUIRE(b.code == 0);
  return out;
}

}  // namespace

TEST_CASE("SIGTERM to dpx plot and dpx report ends the gnuplot they run and removes their scratch folders") {
  TempDir dir("debris_plot");
  const std::string bench = bench_folder(dir), gp = sleepy_gnuplot(dir);
  fs::create_directories(dir.file("tmp"));
  for (const std::string& cmd : {"plot " + bench + " --out " + dir.file("figs") + " --gnuplot " + gp,
                                 "report " + bench + " --out " + dir.file("r.html") + " --gnuplot " + gp}) {
    CAPTURE(cmd);
    fs::remove(dir.file("gnuplot.pid"));
    BackgroundJob job("env TMPDIR=" + dir.file("tmp") + " " + std::string(DPX_BINARY) + " " + cmd, dir.path / "out.txt");
    const int gnuplot = wait_for_pid_file(dir.file("gnuplot.pid"), 30);
    REQUIRE(gnuplot > 0);
    job.signal_job(SIGTERM);
    REQUIRE(job.finished(30));
    CAPTURE(job.output());
    CHECK(job.exit_code() == 128 + SIGTERM);
    CHECK_FALSE(alive(gnuplot));
    // Nothing of the run is left: no scratch folder in --out or in TMPDIR, no figure, no page.
    CHECK(dir.entries() == std::vector<std::string>{"bench", "figs", "gnuplot.pid", "out.txt", "slow-gnuplot", "tmp"});
    CHECK(fs::is_empty(dir.file("figs")));
    CHECK(fs::is_empty(dir.file("tmp")));
  }
}

TEST_CASE("SIGTERM to dpx study ends its running step too: no orphan keeps writing") {
  TempDir dir("debris_study");
  const std::string out = dir.file("s");
  BackgroundJob job(std::string(DPX_BINARY) + " study collectives --quick --max-devices 2 --gnuplot /nonexistent --out " +
                        out,
                    dir.path / "out.txt");
  // The study prints each step's command line before it starts the step.
  REQUIRE(job.wait_for_lines("== dpx study collectives: step 2", 1, 60));
  int step = -1;
  for (auto t = std::chrono::steady_clock::now(); step < 0 && seconds_since(t) < 10;) {
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string stat = file_text(e.path() / "stat");
      const size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(stat.substr(close + 2));
      char state;
      int ppid = 0;
      rest >> state >> ppid;
      if (ppid == job.pid()) step = std::atoi(e.path().filename().c_str());
    }
  }
  REQUIRE(step > 0);
  job.signal_job(SIGTERM);
  REQUIRE(job.finished(60));
  CAPTURE(job.output());
  CHECK(job.exit_code() == 128 + SIGTERM);
  CHECK_FALSE(alive(step));
}

TEST_CASE("a file over ulimit -f ends the write with a message and leaves no temporary") {
  TempDir dir("debris_ulimit");
  const std::string w = dir.file("w.safetensors");
  // 8 KiB: the model's weights (150 KB) do not fit; the write fails with EFBIG instead of SIGXFSZ.
  const DpxResult r = run_command("ulimit -f 16 && " + std::string(DPX_BINARY) +
                                  " train --model mlp --dataset synthetic --image-size 8 --channels 1 --steps 1 "
                                  "--warmup 0 --no-eval --threads 1 --workers 0 --save " + w);
  CAPTURE(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("cannot write " + w + " (--save): File too large") != std::string::npos);
  CHECK(dir.entries().empty());
}
