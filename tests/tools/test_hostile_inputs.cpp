// Nothing waits forever, nothing grows without bound (issue "Safe with anyone's files", class 4): a
// FIFO given where dpx reads a file is refused at once (plot, report, fit, predict, train's
// --weights and --data-dir), an input too large or a trace naming rank 100000000 is refused with the
// limit, and a command that is not an MPI program refuses mpirun -np 2 at once. Every command runs
// under `timeout`, so a hang fails the test instead of stalling it. Seen failing before: each FIFO
// blocked its reader for ever, the edited trace wrote a 2.6 GB gnuplot script.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/quote.hpp"
#include "mpi_run.hpp"
#include "run_dpx.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::TempDir;

namespace {

// `args` ends within 20 s with exit 2 and a message holding `needle`.
void refused_at_once(const std::string& args, const std::string& needle) {
  CAPTURE(args);
  const DpxResult r = run_command("timeout 20 " + std::string(DPX_BINARY) + " " + args);
  CAPTURE(r.output);
  CHECK(r.code != 124);  // timeout's code: it hung
  CHECK(r.code == 2);
  CHECK(r.output.find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("a FIFO where a file is read is refused at once, naming it") {
  TempDir dir("hostile_fifo");
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  refused_at_once("plot " + fifo + " --out " + dir.file("figs"), "is a FIFO");
  refused_at_once("report " + fifo + " --out " + dir.file("r.html"), "is a FIFO");
  refused_at_once("fit " + fifo + " --out " + dir.file("fit.json"), "is a FIFO");
  refused_at_once("predict --model mlp --fit " + fifo, "is a FIFO");
  refused_at_once("predict --model mlp --link 10gbit,5us --compare " + fifo, "is a FIFO");
  // --weights: a FIFO is no regular file (exit 1: a bad file, as a damaged one).
  const DpxResult w = run_command("timeout 20 " + std::string(DPX_BINARY) +
                                  " train --model mlp --dataset synthetic --image-size 8 --channels 1 --steps 1 "
                                  "--warmup 0 --no-eval --threads 1 --workers 0 --weights " + fifo);
  CAPTURE(w.output);
  CHECK(w.code != 124);
  CHECK(w.code != 0);
  CHECK(w.output.find("not a regular file") != std::string::npos);
  // An MNIST file that is a FIFO in --data-dir.
  fs::create_directories(dir.file("mnist"));
  REQUIRE(::mkfifo(dir.file("mnist/train-images-idx3-ubyte").c_str(), 0600) == 0);
  const DpxResult d = run_command("timeout 20 " + std::string(DPX_BINARY) +
                                  " train --model mlp --dataset mnist --data-dir " + dir.file("mnist") +
                                  " --steps 1 --warmup 0 --no-eval --threads 1 --workers 0");
  CAPTURE(d.output);
  CHECK(d.code != 124);
  CHECK(d.code != 0);
}

TEST_CASE("an input too large, or a trace naming an impossible rank, is refused with the limit") {
  TempDir dir("hostile_size");
  // A sparse file: 300 MiB on paper, nothing on disk; refused by its size before it is read.
  {
    std::ofstream(dir.file("big.csv")) << "scaling,model\n";
  }
  fs::resize_file(dir.file("big.csv"), uint64_t(300) << 20);
  refused_at_once("plot " + dir.file("big.csv") + " --out " + dir.file("figs"), "more than the 256 MiB");
  refused_at_once("fit " + dir.file("big.csv") + " --out " + dir.file("fit.json"), "more than the 256 MiB");
  // One edited field of a trace: pid 100000000.
  std::ofstream(dir.file("t.json"))
      << R"({"traceEvents":[{"ph":"X","name":"forward","pid":100000000,"tid":2,"ts":10,"dur":5}]})";
  refused_at_once("plot " + dir.file("t.json") + " --out " + dir.file("figs"),
                  "pid 1e+08 is not a rank in [0, 4096)");
  std::ofstream(dir.file("u.json")) << R"({"traceEvents":[{"ph":"X","name":"forward","pid":"0","ts":10}]})";
  refused_at_once("plot " + dir.file("u.json") + " --out " + dir.file("figs"), "event 0: 'pid' is not a finite number");
  CHECK(!fs::exists(dir.file("figs")));
}

TEST_CASE("commands that are not MPI programs refuse mpirun -np 2 at once") {
#ifdef DPX_MPIEXEC
  TempDir dir("hostile_mpi");
  for (const std::string& cmd : {std::string("plot x"), std::string("models mlp"), std::string("study devices --quick")}) {
    CAPTURE(cmd);
    const DpxResult r = run_command("cd " + dpx::shell_quote(dir.path.string()) + " && timeout 60 " + mpirun(2) +
                                    DPX_BINARY + " " + cmd);
    CAPTURE(r.output);
    CHECK(r.code != 124);
    CHECK(r.code != 0);
    CHECK(r.output.find("is not an MPI program: it runs once, on one process") != std::string::npos);
  }
  CHECK(dir.entries().empty());
#else
  MESSAGE("built without MPI: nothing to refuse");
#endif
}
