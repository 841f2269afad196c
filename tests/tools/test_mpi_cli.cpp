// dpx under mpirun, end to end, as users run it: k processes reproduce one replica on the same
// global batch (DDP with buckets, with accumulation, with hier and with the library's
// all-reduce); rank 0 alone prints and writes one set of outputs; usage errors are said once; a
// stopped rank ends the job with a stall report and a killed rank with a message naming it, each
// within the timeout; collective and bench run over the job's processes.
#include <doctest/doctest.h>

#ifdef DPX_MPIEXEC
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.hpp"
#include "mpi_run.hpp"
#include "weights_diff.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::TempDir;

namespace {

// A small MLP run; every flag but --lr, --batch-size and --log-interval, which each test adds.
const std::string kMlpAnyLr =
    "train --model mlp --dataset synthetic --image-size 8 --channels 1 --synthetic-size 512 --steps 10 "
    "--epochs 1 --momentum 0.9 --weight-decay 1e-4 --seed 7 --threads 1 --workers 1 --warmup 0 --no-eval ";
const std::string kMlpRun = kMlpAnyLr + "--lr 0.05 ";
const std::string kMlp = kMlpRun + "--batch-size 24 --log-interval 1000 ";

// Mean loss over ranks at each global step (the loss of the global batch), from steps.csv.
std::vector<double> global_losses(const fs::path& steps_csv) {
  std::map<int64_t, std::pair<double, int>> acc;
  std::istringstream in(file_text(steps_csv));
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    REQUIRE(cells.size() > 4);
    auto& a = acc[std::stoll(cells[3])];
    a.first += std::stod(cells[4]);
    a.second += 1;
  }
  std::vector<double> out;
  for (const auto& [step, a] : acc) out.push_back(a.first / a.second);
  return out;
}

void check_same_run(const fs::path& single, const fs::path& parallel) {
  const auto l1 = global_losses(single / "steps.csv"), lk = global_losses(parallel / "steps.csv");
  REQUIRE(l1.size() == 10);
  REQUIRE(lk.size() == 10);
  dpx::testing::check_close(lk, l1, 1e-5);
  CHECK(l1.back() < l1.front());  // it learned
  CHECK(dpx::testing::weights_rel_diff(single / "w.safetensors", parallel / "w.safetensors") <= 1e-5);
}

}  // namespace

TEST_CASE("mpirun -np 2/3/4 dpx train reproduces one replica on the same global batch") {
  const TempDir tmp("mpi_equivalence");
  const fs::path& d = tmp.path;
  auto train = [&](const std::string& launch, const std::string& name, const std::string& extra) {
    const fs::path out = d / name;
    DpxResult r = run_command(launch + DPX_BINARY + " " + kMlp + extra + " --out " + out.string() + " --save " +
                              (out / "w.safetensors").string());
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    return out;
  };
  const fs::path single = train("", "single", "");
  const fs::path single_acc = train("", "single_acc", "--accumulate 2");
  // DDP with gradients in many small buckets (0.001 MiB), every process count.
  for (int np : {2, 3, 4}) {
    CAPTURE(np);
    check_same_run(single, train(mpirun(np), "ddp" + std::to_string(np), "--bucket-mb 0.001"));
  }
  // Gradient accumulation: every 2 micro-steps.
  check_same_run(single_acc, train(mpirun(3), "acc3", "--accumulate 2 --bucket-mb 0.001"));
  // Hierarchical all-reduce over two nodes of two, and the library's MPI_Allreduce.
  check_same_run(single, train(mpirun(4), "hier4", "--algo hier --ranks-per-node 2"));
  check_same_run(single, train(mpirun(2), "mpi2", "--algo mpi"));
}

TEST_CASE("mpirun -np 2/3 with --grad-dtype bf16 and fp16 trains as the same number of thread ranks, bit for bit") {
  // The thread ranks' runs are checked against one fp32 replica in tests/parallel/test_grad_dtype.cpp;
  // processes must run the same half-precision all-reduce (dpx's ring), and dynamic loss scaling
  // (fp16's default) must take the same decisions, so the weights are equal to the last bit.
  const TempDir tmp("mpi_grad_dtype");
  auto train = [&](const std::string& launch, const std::string& name, const std::string& extra) {
    const fs::path out = tmp.path / name;
    DpxResult r = run_command(launch + DPX_BINARY + " " + kMlpRun + "--batch-size 24 --log-interval 1000 --bucket-mb "
                              "0.001 --parallel ddp " + extra + " --out " + out.string() + " --save " +
                              (out / "w.safetensors").string());
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    return out;
  };
  for (int np : {2, 3}) {
    for (const std::string dtype : {"bf16", "fp16"}) {
      CAPTURE(np);
      CAPTURE(dtype);
      const std::string tag = dtype + std::to_string(np);
      const fs::path threads =
          train("", "threads_" + tag, "--devices cpu:" + std::to_string(np) + " --grad-dtype " + dtype);
      const fs::path procs = train(mpirun(np), "mpi_" + tag, "--grad-dtype " + dtype);
      CHECK(dpx::testing::weights_rel_diff(threads / "w.safetensors", procs / "w.safetensors") == 0);
      CHECK(file_text(procs / "steps.csv").find(",loss_scale,update_skipped") != std::string::npos);
    }
  }
  // The library's MPI_Allreduce on fp16 (dpx's reduction, in f32 and rounded back, as its op).
  const fs::path lib = train(mpirun(2), "mpi_lib_fp16", "--grad-dtype fp16 --algo mpi");
  CHECK(dpx::testing::weights_rel_diff(tmp.path / "threads_fp162" / "w.safetensors", lib / "w.safetensors") == 0);
}

TEST_CASE("under mpirun rank 0 alone prints and writes one set of outputs, with the launch in config.json") {
  const TempDir tmp("mpi_outputs");
  const fs::path& d = tmp.path;
  DpxResult r = run_command(mpirun(3) + DPX_BINARY + " " + kMlpRun + "--batch-size 12 --log-interval 0 --trace " +
                            (d / "trace.json").string() + " --out " + d.string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  auto count = [&](const std::string& text) {
    int n = 0;
    for (size_t at = r.output.find(text); at != std::string::npos; at = r.output.find(text, at + 1)) ++n;
    return n;
  };
  CHECK(count("| processes  | 3 MPI ranks on 1 node") == 1);  // one configuration table
  CHECK(count("| mpi        | ") == 1);
  CHECK(count("MPI_THREAD_MULTIPLE") >= 1);
  CHECK(count("epoch 1/1 | step 10/10") == 1);                // progress from rank 0 only
  CHECK(count("wrote ") == 2);                                 // the CSVs and the trace, once each
  std::istringstream steps(file_text(d / "steps.csv"));
  std::map<int, int> rows_of_rank;
  std::string line;
  std::getline(steps, line);
  while (std::getline(steps, line)) ++rows_of_rank[std::stoi(line)];
  CHECK(rows_of_rank == std::map<int, int>{{0, 10}, {1, 10}, {2, 10}});
  const auto config = nlohmann::json::parse(file_text(d / "config.json"));
  CHECK(config["ranks"] == 3);
  CHECK(config["launch"]["backend"] == "mpi");
  CHECK(config["launch"]["processes"] == 3);
  CHECK(config["launch"]["thread_level"] == "MPI_THREAD_MULTIPLE");
  CHECK(config["launch"]["clock_offset_s"].size() == 3);
  CHECK(config["launch"]["clock_uncertainty_s"].size() == 3);
  const auto trace = nlohmann::json::parse(file_text(d / "trace.json"));
  std::map<int, int> pids;
  for (const auto& e : trace["traceEvents"]) ++pids[e["pid"].get<int>()];
  CHECK(pids.size() == 3);  // a timeline per rank
  // Every rank's bucket all-reduces reached rank 0's trace (gathered with the step records).
  std::set<int> reduced_on;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["name"].get<std::string>().rfind("bucket ", 0) == 0) reduced_on.insert(e["pid"].get<int>());
  CHECK(reduced_on == std::set<int>{0, 1, 2});
  CHECK(tmp.entries() == std::vector<std::string>{".dpx.lock", "config.json", "steps.csv", "summary.csv", "trace.json"});
}

TEST_CASE("usage errors under mpirun are said once, and every rank leaves with exit code 2") {
  struct Case {
    std::string command, needle;
  };
  const std::string dpx = std::string(DPX_BINARY) + " ";
  const std::string mpmd = std::string(DPX_MPIEXEC) + " " + DPX_MPIEXEC_FLAGS + " -np 1 ";  // then ": -np 1 ..."
  const std::string brief = "train --model mlp --dataset synthetic --image-size 8 --channels 1 --steps 2 --warmup 0 --no-eval ";
  const std::vector<Case> cases = {
      {mpirun(2) + dpx + kMlp + "--devices cpu:4", "--devices cpu:4 under MPI with 2 processes: each process is one rank"},
      {mpirun(2) + dpx + kMlp + "--parallel dp", "--parallel dp under MPI: DataParallel runs its replicas as threads"},
      {mpirun(2) + dpx + kMlp + "--parallel none", "--parallel none under MPI with 2 processes"},
      {mpirun(2) + dpx + kMlp + "--bogus", "The following argument was not expected: --bogus"},
      {mpirun(2) + dpx + "collective --backend threads", "--backend threads under MPI with 2 processes"},
      {mpirun(2) + dpx + "collective --ranks 3", "--ranks 3 under MPI with 2 processes"},
      {mpirun(2) + dpx + "collective -t gather --algo ring", "--algo ring does not apply to -t gather: use tree"},
      // Ranks started with different options (MPMD): the differing option is named.
      {mpmd + dpx + brief + "--seed 1 : -np 1 " + dpx + brief + "--seed 2",
       "the ranks were started with different options: --seed is 1 on rank 0 and 2 on rank 1"},
      // One rank failing alone: the message names it.
      {mpmd + dpx + brief + "--epochs 0 : -np 1 " + dpx + brief, "rank 0: --epochs must be at least 1"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.command);
    DpxResult r = run_command(c.command);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.needle) != std::string::npos);
    const size_t first = r.output.find("dpx: error:");
    CHECK(first != std::string::npos);
    CHECK(r.output.find("dpx: error:", first + 1) == std::string::npos);  // said once, not by every rank
  }
}

TEST_CASE("mpirun -np 2 dpx train --backend nccl --devices cuda gets as far as each process's GPU (none here)") {
  // The flags of a GPU job, one process per GPU: every rank reaches the choice of its GPU and says
  // that it has none (it said "--devices 'cuda': not a list of CUDA devices" before the launch).
  const DpxResult r = run_command(mpirun(2) + DPX_BINARY + " " + kMlp + "--parallel ddp --backend nccl --devices cuda");
  CAPTURE(r.output);
  CHECK(r.code != 0);
  CHECK(r.output.find("--backend nccl: no usable CUDA device") != std::string::npos);
  CHECK(r.output.find("not a list of CUDA devices") == std::string::npos);
}

TEST_CASE("a diverging run under mpirun stops on every rank at the same step, said once, without an abort") {
  const std::string diverging = std::string(DPX_BINARY) + " " + kMlpAnyLr + "--lr 1e20 --batch-size 24 ";
  DpxResult stop = run_command(mpirun(2) + diverging);
  CAPTURE(stop.output);
  CHECK(stop.code == 1);
  const size_t first = stop.output.find("dpx: error: non-finite loss (");
  CHECK(first != std::string::npos);
  CHECK(stop.output.find("after the all-reduce: every rank has them); lower --lr") != std::string::npos);
  CHECK(stop.output.find("dpx: error:", first + 1) == std::string::npos);
  CHECK(stop.output.find("MPI_ABORT") == std::string::npos);  // every rank left by itself
  CHECK(stop.output.find("vanished") == std::string::npos);
  DpxResult skip = run_command(mpirun(2) + diverging + "--on-nonfinite skip");
  CAPTURE(skip.output);
  CHECK(skip.code == 0);
  CHECK(skip.output.find("update skipped (--on-nonfinite skip)") != std::string::npos);
}

// Starts `job`, waits for 5 progress lines, sends rank 1 `signal`, and returns how long the job
// took to end after that (a failed REQUIRE if it did not within 30 s); `out` gets its output.
double signal_rank_1(const std::string& job, const fs::path& log, int signal, int& pid, std::string& out, int& code) {
  BackgroundJob run(job, log);
  REQUIRE(run.wait_for_lines("| step ", 5, 60));
  pid = run.rank_pid(1);
  REQUIRE(pid > 0);
  const auto t = std::chrono::steady_clock::now();
  kill(pid, signal);
  const bool ended = run.finished(30);
  const double took = seconds_since(t);
  kill(pid, SIGKILL);  // a stopped rank may outlive the job
  run.kill_all();
  out = run.output();
  code = run.exit_code();
  CAPTURE(out);
  REQUIRE(ended);
  return took;
}

TEST_CASE("a stopped rank ends the job with a stall report, and a killed rank with a message naming it") {
  const TempDir tmp("mpi_faults");
  const std::string job = mpirun(3) + DPX_BINARY +
                          " train --model lenet5 --dataset synthetic --synthetic-size 200000 --batch-size 48 --epochs 1 "
                          "--threads 1 --workers 1 --log-interval 0 --no-eval --comm-timeout 3 --out " +
                          (tmp.path / "out").string();
  int pid = 0, code = 0;
  std::string out;
  SUBCASE("SIGSTOP: the others wait --comm-timeout, then rank 0 reports who did not arrive") {
    const double took = signal_rank_1(job, tmp.path / "stop.log", SIGSTOP, pid, out, code);
    CAPTURE(out);
    MESSAGE("stall report and exit ", took, " s after rank 1 stopped (--comm-timeout 3)");
    CHECK(code != 0);
    CHECK(took >= 3);
    CHECK(took < 15);  // timeout + the grace for answers + the launcher taking the job down
    CHECK(out.find("dpx: error: stall: rank ") != std::string::npos);
    CHECK(out.find("(--comm-timeout 3.0 s) in all_reduce #") != std::string::npos);
    CHECK(out.find("rank 1 (pid " + std::to_string(pid)) != std::string::npos);
    CHECK(out.find("did not answer: hung, stopped, or unreachable") != std::string::npos);
  }
  SUBCASE("SIGKILL: the job ends at once and rank 0 names the rank that vanished") {
    const double took = signal_rank_1(job, tmp.path / "kill.log", SIGKILL, pid, out, code);
    CAPTURE(out);
    MESSAGE("exit ", took, " s after rank 1 was killed (--comm-timeout 3)");
    CHECK(code != 0);
    CHECK(took < 3);  // within the timeout
#ifdef DPX_TEST_MPICH
    // MPICH's mpiexec (hydra) kills the other ranks itself the moment one dies, before they can
    // speak, and names the process (docs/cluster.md, MPICH).
    CHECK(out.find("BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES") != std::string::npos);
    CHECK(out.find("PID " + std::to_string(pid) + " RUNNING AT") != std::string::npos);
#else
    const bool named = out.find("dpx: error: rank 1 (pid " + std::to_string(pid) + " on ") != std::string::npos ||
                       out.find("dpx: rank 0: stopped by SIGTERM") != std::string::npos;
    CHECK(named);
    CHECK(out.find("vanished") != std::string::npos);
#endif
  }
  // Output files are whole or absent: the job died before writing any, and left no temporary
  // (only the lock of its output folder).
  for (const auto& e : fs::directory_iterator(tmp.path / "out")) CHECK(e.path().filename() == ".dpx.lock");
}

// The ranks vote on stopping with the signal each was asked by: one rank's SIGINT stops every
// rank after the same update, all naming SIGINT, exit 130 (they said SIGTERM and exited 143).
TEST_CASE("SIGINT to one rank stops the job after an agreed step, every rank naming SIGINT") {
  const TempDir tmp("mpi_sigint");
  const std::string job = mpirun(2) + DPX_BINARY +
                          " train --model lenet5 --dataset synthetic --synthetic-size 200000 --batch-size 32 --epochs 1 "
                          "--threads 1 --workers 1 --no-eval --out " + (tmp.path / "out").string();
  int pid = 0, code = 0;
  std::string out;
  signal_rank_1(job, tmp.path / "sigint.log", SIGINT, pid, out, code);
  CAPTURE(out);
  CHECK(code == 128 + SIGINT);
  CHECK(out.find("stopped by SIGINT after ") != std::string::npos);
  CHECK(out.find("SIGTERM") == std::string::npos);
}

TEST_CASE("dpx collective under mpirun: dpx's algorithms and the library's, side by side, all correct") {
  DpxResult r = run_command(mpirun(2) + DPX_BINARY + " collective --algo all -b 1K -e 64K -f 8 -n 3 -w 1");
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("backend mpi, 2 ranks (MPI processes on 1 node") != std::string::npos);
  for (const char* algo : {"ring", "tree", "naive", "rhd", "hier", "mpi"})
    CHECK(r.output.find(std::string("# Algorithm: ") + algo + "\n") != std::string::npos);
  int ok = 0;
  for (size_t at = r.output.find("# Out of bounds values : 0 OK"); at != std::string::npos;
       at = r.output.find("# Out of bounds values : 0 OK", at + 1))
    ++ok;
  CHECK(ok == 6);
  CHECK(r.output.find("ring      tree     naive       rhd      hier       mpi") != std::string::npos);
}

TEST_CASE("dpx collective under mpirun: sendrecv, alltoall, gather and scatter, dpx's and the library's, all correct") {
  struct Pattern {
    std::string name, collective;
    std::vector<std::string> algos;
    double bus_factor;  // nccl-tests' busbw / algbw on 3 ranks
  };
  const std::vector<Pattern> patterns = {{"sendrecv", "sendrecv", {"ring", "mpi"}, 1.0},
                                         {"alltoall", "all_to_all", {"ring", "mpi"}, 2.0 / 3},
                                         {"gather", "gather", {"tree", "naive", "rhd", "mpi"}, 2.0 / 3},
                                         {"scatter", "scatter", {"tree", "naive", "rhd", "mpi"}, 2.0 / 3}};
  TempDir dir("mpi-patterns");
  for (const Pattern& p : patterns) {
    CAPTURE(p.name);
    const fs::path csv = dir.path / (p.name + ".csv");
    DpxResult r = run_command(mpirun(3) + DPX_BINARY + " collective -t " + p.name +
                              " -r 1 --algo all -b 1K -e 64K -f 8 -n 2 -w 1 --csv " + csv.string());
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    for (const std::string& algo : p.algos) CHECK(r.output.find("# Algorithm: " + algo + "\n") != std::string::npos);
    std::istringstream in(file_text(csv));
    std::string line;
    std::getline(in, line);
    CHECK(line.substr(line.size() - 35) == ",wrong,nodes,limit_gbs,limit_source");
    std::map<std::string, int> rows_of_algo;
    while (std::getline(in, line)) {
      CAPTURE(line);
      std::vector<std::string> cells;
      std::stringstream ss(line);
      for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
      REQUIRE(cells.size() == 17);
      CHECK(cells[0] == p.collective);
      CHECK(cells[2] == "mpi");
      CHECK(cells[3] == "3");
      CHECK(cells[8] == (p.name == "gather" || p.name == "scatter" ? "1" : "-1"));  // root
      const double algbw = std::stod(cells[11]), busbw = std::stod(cells[12]);
      CHECK(busbw == doctest::Approx(algbw * p.bus_factor).epsilon(1e-3));  // the CSV's 6 decimals
      CHECK(cells[13] == "0");  // wrong, in and out of place
      CHECK(cells[14] == "1");  // nodes: one machine
      CHECK(std::stod(cells[15]) > 0);  // the limit: one rank's memcpy bandwidth, every rank on one machine
      CHECK(cells[16] == "memcpy");
      ++rows_of_algo[cells[1]];
    }
    CHECK(rows_of_algo.size() == p.algos.size());
    for (const auto& [algo, rows] : rows_of_algo) CHECK(rows == 3 * 2);  // sizes 1K, 8K, 64K, out of and in place
  }
}

TEST_CASE("dpx collective under mpirun --net-sim: a ring all-reduce over 2 processes takes the alpha-beta model's time") {
  TempDir dir("mpi-netsim");
  const fs::path csv = dir.path / "ring.csv";
  DpxResult r = run_command(mpirun(2) + DPX_BINARY + " collective --net-sim 40MB,1ms -b 4M -e 4M -n 3 -w 1 --csv " +
                            csv.string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("# net-sim: 0.32 Gbit/s (0.04 GB/s), 1000 us") != std::string::npos);
  std::istringstream in(file_text(csv));
  std::string line;
  std::getline(in, line);
  REQUIRE(line.find("time_us") != std::string::npos);
  // 2 (k - 1) messages of S / k: 2 (1 ms + 2 MiB / 40 MB/s).
  const double model_us = 2 * (1000 + (4 << 20) / 2 / 40e6 * 1e6);
  int rows = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    REQUIRE(cells.size() >= 11);
    const double time_us = std::stod(cells[10]);
    CAPTURE(line);
    CHECK(time_us >= model_us);
    CHECK(time_us <= 2 * model_us + 20000);  // two processes on a shared 2-core machine, maybe sanitized
    ++rows;
  }
  CHECK(rows == 2);  // out of place and in place
  DpxResult bad = run_command(mpirun(2) + DPX_BINARY + " collective --algo mpi --net-sim 40MB,1ms");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--net-sim shapes the exchanges of dpx's own algorithms") != std::string::npos);
}

TEST_CASE("dpx bench under mpirun sweeps the configurations that fit in the job, on its first k processes") {
  const TempDir tmp("mpi_bench");
  const fs::path& d = tmp.path;
  DpxResult r = run_command(mpirun(2) + DPX_BINARY +
                            " bench --models mlp --image-size 8 --channels 1 --batch-sizes 8 --steps 4 --warmup 1 "
                            "--devices cpu:1,2,4 --threads 1 --out " + d.string());
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("skipping --devices cpu:4: this MPI job has 2 ranks") != std::string::npos);
  std::istringstream csv(file_text(d / "results.csv"));
  std::string line;
  std::vector<std::string> rows;
  std::getline(csv, line);
  while (std::getline(csv, line)) rows.push_back(line);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].find(",cpu:1,ddp,ring,1,") != std::string::npos);
  CHECK(rows[1].find(",cpu:2,ddp,ring,2,") != std::string::npos);
  CHECK(fs::exists(d / "steps" / "mlp_b8_ddp_cpu2.csv"));
}

TEST_CASE("dpx --version under mpirun names the MPI library and the thread level in use") {
  DpxResult r = run_command(mpirun(2) + DPX_BINARY + " --version");
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("MPI_THREAD_MULTIPLE, 2 ranks on 1 node") != std::string::npos);
  int lines = 0;
  for (size_t at = r.output.find("dpx 0."); at != std::string::npos; at = r.output.find("dpx 0.", at + 1)) ++lines;
  CHECK(lines == 1);  // rank 0 alone writes to standard output
  DpxResult plain = run_dpx("--version");
  CHECK(plain.output.find("not in use (run under mpirun or srun") != std::string::npos);
}
#endif
