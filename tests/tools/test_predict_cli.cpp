// dpx collective -> dpx fit -> dpx predict end to end, on a simulated network so that the
// numbers are known: the fit recovers the network's latency and rate, predict's DDP step agrees
// with what dpx bench measures under the same network, and careless inputs get clear errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/csv_table.hpp"
#include "analysis/fit.hpp"
#include "../common/files.hpp"
#include "run_dpx.hpp"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `csv` (a dpx collective --csv file of one 2-rank all-reduce) with the times a quiet machine would
// measure, 10 us + 1 ns per byte, and its bandwidths to match: what fit and predict do with a fit
// is under test here, not how quiet the machine is (a busy one made dpx fit refuse the times).
void make_times_exact(const std::string& csv) {
  std::ifstream in(csv);
  std::string header, line, out;
  std::getline(in, header);
  out = header + "\n";
  auto column = [&](const std::string& name) {
    std::istringstream cells(header);
    int i = 0;
    for (std::string c; std::getline(cells, c, ','); ++i)
      if (c == name) return i;
    FAIL("no column " << name);
    return -1;
  };
  const int bytes = column("bytes"), time = column("time_us"), algbw = column("algbw_gbs"), busbw = column("busbw_gbs");
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::istringstream row(line);
    for (std::string c; std::getline(row, c, ',');) cells.push_back(c);
    const double b = std::stod(cells[static_cast<size_t>(bytes)]), us = 10 + b / 1000;
    cells[static_cast<size_t>(time)] = std::to_string(us);
    cells[static_cast<size_t>(algbw)] = cells[static_cast<size_t>(busbw)] = std::to_string(b / us / 1e3);  // 2 ranks
    for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + cells[i];
    out += "\n";
  }
  in.close();
  std::ofstream(csv) << out;
}

}  // namespace

TEST_CASE("fit recovers a simulated network, and predict's DDP step matches dpx bench on it") {
  dpx::testing::TempDir dir("predict_cli");
  // 5 ms and 100 MB/s: far above what the threads backend itself costs (microseconds, GB/s).
  const std::string net = "--net-sim 100MB,5ms ";
  DpxResult c = run_dpx("collective -t all_reduce --algo ring --ranks 2 -b 64K -e 4M -f 4 -n 3 -w 1 " + net +
                        "--csv " + dir.file("c.csv"));
  CAPTURE(c.output);
  REQUIRE(c.code == 0);
  DpxResult f = run_dpx("fit " + dir.file("c.csv") + " --out " + dir.file("fit.json"));
  CAPTURE(f.output);
  REQUIRE(f.code == 0);
  CHECK(f.output.find("all_reduce ring (threads, in place)") != std::string::npos);
  const dpx::analysis::FitResult fits = dpx::analysis::read_fit_json(dir.file("fit.json"), "--fit");
  bool seen = false;
  for (const auto& x : fits.collectives) {
    if (x.collective != "all_reduce" || !x.in_place) continue;
    seen = true;
    CHECK(x.ok);
    // alpha: the latency plus a wake-up; beta: 1 / rate plus the copy and (folded in) the sum.
    CHECK(x.alpha_s == doctest::Approx(5e-3).epsilon(0.15));
    CHECK(x.beta_s_per_byte == doctest::Approx(1e-8).epsilon(0.10));
  }
  CHECK(seen);

  // DDP of lenet5 at 2 ranks on the same network: its 240 KB of gradients take ~12 ms a step,
  // most of it exposed, more than the computation. The prediction is compared with dpx bench's
  // measured step; a measurement that other processes disturbed (dpx bench's other_cpu_share: the
  // machine is shared) is taken again, up to three times in all, and said.
  const std::string model = "--model lenet5 --batch-size 16 --image-size 28 ";
  for (int attempt = 1;; ++attempt) {
    CAPTURE(attempt);
    const std::string bench = dir.file("bench" + std::to_string(attempt));
    DpxResult b = run_dpx("bench --models lenet5 --batch-sizes 16 --devices cpu:1,2 --dataset synthetic --image-size 28 "
                          "--steps 12 --warmup 3 " + net + "--out " + bench);
    CAPTURE(b.output);
    REQUIRE(b.code == 0);
    DpxResult p = run_dpx("predict " + model + "--ranks 1..8 --fit " + dir.file("fit.json") + " --compare " + bench +
                          "/results.csv --csv " + dir.file("p.csv"));
    CAPTURE(p.output);
    REQUIRE(p.code == 0);
    CHECK(p.output.find("best for batch 16:") != std::string::npos);
    CHECK(p.output.find("copies inside one machine") == std::string::npos);  // a network, if a simulated one
    const auto t = dpx::analysis::CsvTable::read(dir.file("p.csv"), "p.csv");
    REQUIRE(t.rows() == 4);  // 1, 2, 4, 8 ranks
    const size_t ranks = t.column("ranks"), err = t.column("error"), exposed = t.column("exposed_s");
    CHECK(t.number(0, exposed) == 0);
    CHECK(t.number(1, exposed) > 5e-3);  // the network shows
    CHECK(t.text(1, err) != "");         // dpx bench measured 2 ranks
    CHECK(t.number(1, ranks) == 2);
#if defined(DPX_SANITIZE)  // the code under test is instrumented (this file is not: tests/CMakeLists.txt)
    // Under AddressSanitizer the computation's speed depends on the allocator's quarantine, so one
    // replica measured for a few steps (predict) and 12 steps of dpx bench disagree by more than the
    // network's share; the agreement is checked in the ordinary build.
    MESSAGE("sanitized build: the predicted step is not compared with dpx bench's");
    break;
#else
    const double error = std::abs(t.number(1, err));
    if (error < 0.3) break;  // within 30 % of the measured step (a loaded machine's noise)
    const auto measured = dpx::analysis::CsvTable::read(bench + "/results.csv", "results.csv");
    double others = 0;
    for (size_t row = 0; row < measured.rows(); ++row)  // empty where nothing was measured beside it
      if (!measured.text(row, measured.column("other_cpu_share")).empty())
        others = std::max(others, measured.number(row, measured.column("other_cpu_share")));
    if (others < 0.1 || attempt == 3) {
      CHECK(error < 0.3);
      break;
    }
    MESSAGE("the predicted step is off by ", error, " where other processes took ", others,
            " of the CPU during dpx bench: measured again");
#endif
  }
}

// A fit of thread ranks without a simulated network measured memory copies, and one of small
// messages holds for none of DDP's buckets: predict says both, instead of an efficiency of 0.999
// at 512 ranks without a word.
TEST_CASE("predict warns of a memory transport and of a fit that holds for none of the buckets") {
  dpx::testing::TempDir dir("predict_warn");
  DpxResult c = run_dpx("collective -t all_reduce --algo ring --ranks 2 -b 1K -e 64K -f 2 -n 5 -w 1 --csv " +
                        dir.file("c.csv"));
  REQUIRE(c.code == 0);
  make_times_exact(dir.file("c.csv"));
  REQUIRE(run_dpx("fit " + dir.file("c.csv") + " --out " + dir.file("fit.json")).code == 0);
  DpxResult p = run_dpx("predict --model lenet5 --batch-size 16 --image-size 28 --ranks 1..512 --fit " +
                        dir.file("fit.json"));
  CAPTURE(p.output);
  REQUIRE(p.code == 0);
  CHECK(p.output.find("# warning: the network is --fit") != std::string::npos);
  CHECK(p.output.find("copies inside one machine") != std::string::npos);
  CHECK(p.output.find("# warning: none of the") != std::string::npos);
  // --link names a network: no memory warning then.
  DpxResult l = run_dpx("predict --model lenet5 --batch-size 16 --image-size 28 --ranks 1..8 --link 10gbit,20us");
  REQUIRE(l.code == 0);
  CHECK(l.output.find("# warning") == std::string::npos);
}

// Beyond --max-measured-batch the computation follows the line through two measured batches:
// with one measured point, batch 64 was taken as costly as batch 32 (resnet18 at 64x64: 441 ms
// predicted, 829 ms measured). Here batch 32 from measurements at 4 and 16. The check reads the two
// measurements predict printed, so a busy machine cannot fail it (comparing with a later dpx bench
// could: predict once measured batch 4 slower than batch 16 while another test ran).
TEST_CASE("predict extrapolates the computation beyond --max-measured-batch on the line through two batches") {
  dpx::testing::TempDir dir("predict_extrapolate");
  DpxResult p = run_dpx("predict --model resnet18 --image-size 32 --threads 2 --batch-size 32 --max-measured-batch 16 "
                        "--ranks 1 --link 10gbit,5us --steps 4 --csv " + dir.file("p.csv"));
  CAPTURE(p.output);
  REQUIRE(p.code == 0);
  // "batch 4: 259.2 ms (forward 48.9, backward 97.6);": the total, forward and backward.
  struct Measured {
    double total = 0, forward = 0, backward = 0;
  };
  auto measured = [&](const std::string& batch) {
    Measured m;
    const size_t at = p.output.find("batch " + batch + ": ");
    REQUIRE(at != std::string::npos);
    const std::string rest = p.output.substr(at + 8 + batch.size());
    m.total = std::stod(rest);
    const size_t f = rest.find("forward "), b = rest.find("backward ");
    REQUIRE(f != std::string::npos);
    REQUIRE(b != std::string::npos);
    m.forward = std::stod(rest.substr(f + 8));
    m.backward = std::stod(rest.substr(b + 9));
    return m;
  };
  const Measured m4 = measured("4"), m16 = measured("16");
  CHECK(p.output.find("extrapolated beyond --max-measured-batch") != std::string::npos);  // said so
  const auto pt = dpx::analysis::CsvTable::read(dir.file("p.csv"), "p.csv");
  const double predicted_ms = pt.number(0, pt.column("step_s")) * 1e3;
  CAPTURE(m4.total);
  CAPTURE(m16.total);
  CAPTURE(predicted_ms);
  // One rank: the step is the computation, each phase on the line through its two measurements,
  // taken flat where that line would fall (noise: a busy machine once made batch 4's optimizer
  // slower than batch 16's). So the step is at least the line of the totals and batch 16's, and
  // grows beyond batch 16's by at most what the phases that grew add on their lines (forward,
  // backward, and the rest, whose split into load and optimizer is not printed: 10 % for it).
  const double per_batch = (32 - 16) / 12.0;
  auto growth = [&](double at4, double at16) { return std::max(0.0, at16 - at4) * per_batch; };
  const double rest4 = m4.total - m4.forward - m4.backward, rest16 = m16.total - m16.forward - m16.backward;
  const double on_line = m16.total + (m16.total - m4.total) * per_batch;
  CHECK(predicted_ms >= std::max(on_line, m16.total) - 0.5);  // the printed values are rounded to 0.1 ms
  CHECK(predicted_ms <= m16.total + growth(m4.forward, m16.forward) + growth(m4.backward, m16.backward) +
                            growth(rest4, rest16) + 0.1 * m16.total + 0.5);
  if (m4.total + 1 < m16.total) CHECK(predicted_ms > m16.total);  // not flat at batch 16 as with one point
  if (m4.total > m16.total)
    CHECK(p.output.find("# warning: batch 4 measured slower than batch 16") != std::string::npos);
}

TEST_CASE("dpx fit and dpx predict refuse careless input with a clear message") {
  dpx::testing::TempDir dir("predict_bad");
  std::ofstream(dir.file("user.json")) << "{\"mine\": true}\n";
  std::ofstream(dir.file("foreign.csv")) << "a,b\n1,2\n";
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {"fit", "files is required"},
      {"fit " + dir.file("missing.csv"), "cannot read"},
      {"fit " + dir.file("foreign.csv"), "neither a dpx collective --csv file nor a dpx bench results.csv"},
      {"fit " + dir.file("foreign.csv") + " --out " + dir.file("user.json"), "exists and is not a dpx fit file: dpx replaces only its own files"},
      {"predict --model lenet5", "needs a network"},
      {"predict --model nope --link 10gbit,5us", "nope"},
      {"predict --model lenet5 --fit " + dir.file("user.json"), "is not a file that dpx fit wrote"},
      {"predict --model lenet5 --link 10gbit", "--link"},
      {"predict --model lenet5 --link 10gbit,5us --ranks 0..8", "--ranks"},
      {"predict --model lenet5 --link 10gbit,5us --parallel dp", "--parallel dp"},
      {"predict --model lenet5 --link 10gbit,5us --algo hier", "--ranks-per-node"},
      {"predict --model lenet5 --link 10gbit,5us --algo mpi", "--algo mpi"},
      {"predict --model lenet5 --link 10gbit,5us --scaling both", "--scaling"},
      {"predict --model lenet5 --link 10gbit,5us --batch-size 0", "--batch-sizes"},
      {"predict --model lenet5 --link 10gbit,5us --compare " + dir.file("foreign.csv"), "not a dpx bench results.csv"},
  };
  for (const Case& c : cases) {
    const DpxResult r = run_dpx(c.args);
    CAPTURE(c.args);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.expected) != std::string::npos);
  }
  CHECK(slurp(dir.file("user.json")) == "{\"mine\": true}\n");  // never written over
}

// --steps and --warmup mean what they mean in dpx train and dpx bench: the warm-up is among the
// steps, so a --steps that leaves none to measure is refused.
TEST_CASE("predict --steps counts the warm-up, as train and bench do") {
  DpxResult r = run_dpx("predict --model mlp --image-size 8 --link 10gbit,5us --ranks 1..2 --steps 2 --warmup 2");
  CHECK(r.code == 2);
  CHECK(r.output.find("--steps 2 with --warmup 2: no step would be measured") != std::string::npos);
  DpxResult ok = run_dpx("predict --model mlp --image-size 8 --link 10gbit,5us --ranks 1..2 --steps 3 --warmup 2");
  CAPTURE(ok.output);
  CHECK(ok.code == 0);
}
