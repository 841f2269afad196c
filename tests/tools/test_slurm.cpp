// dpx under a real Slurm: scripts/slurmcluster starts munged, slurmctld and slurmd for this test
// (tests/CMakeLists.txt runs it as `scripts/slurmcluster run -- test_tools ...`, which sets
// SLURM_CONF and removes the cluster afterwards). srun --mpi=pmix starts the ranks as mpirun
// would, and they must train the same weights, byte for byte; srun without a PMI plugin is
// refused with the advice; a task killed under srun ends the job with dpx's report; sbatch runs a
// study whole; and scripts/train.sbatch, stopped by SIGTERM and requeued, resumes to the weights
// of an uninterrupted run. Skipped (77) where the cluster cannot start (not root, no slurm-wlm).
#include <doctest/doctest.h>

#ifdef DPX_MPIEXEC
#include <dirent.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mpi_run.hpp"

namespace fs = std::filesystem;

namespace {

const char* slurm_conf() {
  const char* conf = std::getenv("SLURM_CONF");
  if (!conf) {  // run by hand, not through scripts/slurmcluster run
    std::printf("skipped: SLURM_CONF is not set: run this test as `scripts/slurmcluster run -- %s "
                "--source-file=*/tools/test_slurm.cpp` (ctest does)\n", "build/tests/test_tools");
    std::fflush(stdout);
    std::_Exit(77);
  }
  return conf;
}

// How dpx names srun as its launcher, by the plugin.
const std::string kSrunLauncher = std::string(DPX_SRUN_MPI) == "pmix" ? "srun (Slurm, PMIx)" : "srun (Slurm, PMI-2)";

const std::string kTrain = std::string(DPX_BINARY) +
                           " train --model mlp --dataset synthetic --image-size 8 --channels 1 --synthetic-size 512 "
                           "--steps 6 --epochs 1 --batch-size 24 --seed 3 --threads 1 --workers 1 --warmup 0 "
                           "--no-eval --log-interval 1000 ";

// kTrain under `mpirun -np RANKS` and under `SRUN` (an srun command line), into `d`: both must end
// with the same weights, byte for byte (the file holds no time or host). Returns srun's run, whose
// --out is d/out<TAG>.
DpxResult train_under_both(const fs::path& d, int ranks, const std::string& srun, const std::string& tag) {
  const fs::path mine = d / ("mpirun" + tag + ".safetensors"), theirs = d / ("srun" + tag + ".safetensors");
  DpxResult via_mpirun = run_command(mpirun(ranks) + kTrain + "--save " + mine.string());
  CAPTURE(via_mpirun.output);
  REQUIRE(via_mpirun.code == 0);
  DpxResult via_srun = run_command(srun + " " + kTrain + "--save " + theirs.string() + " --out " +
                                   (d / ("out" + tag)).string());
  CAPTURE(via_srun.output);
  REQUIRE(via_srun.code == 0);
  const std::string a = file_text(mine), b = file_text(theirs);
  CHECK(a.size() > 1000);
  CHECK(a == b);
  return via_srun;
}

// A field of `scontrol show job ID` (JobState, Restarts, ...), or "" once the job is gone.
std::string job_field(const std::string& job, const std::string& field) {
  const std::string out = run_command("scontrol show job " + job).output;
  const size_t at = out.find(field + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + field.size() + 1;
  return out.substr(from, out.find_first_of(" \n", from) - from);
}

// Waits until the job has ended (COMPLETED, FAILED, CANCELLED, ...) for good; its state, or the
// last one seen after `timeout_s`. A job that requeues itself may pass through an ended state on
// its way back to PENDING: an end counts once it has held for 3 s (COMPLETED at once).
std::string wait_for_job(const std::string& job, double timeout_s) {
  std::string state, held;
  auto since = std::chrono::steady_clock::now();
  for (auto t = std::chrono::steady_clock::now(); seconds_since(t) < timeout_s;) {
    state = job_field(job, "JobState");
    if (state == "COMPLETED") return state;
    const bool ended = state == "FAILED" || state == "CANCELLED" || state == "TIMEOUT";
    if (state != held) {
      held = state;
      since = std::chrono::steady_clock::now();
    } else if (ended && seconds_since(since) >= 3) {
      return state;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return state;
}

// The pid of the dpx process that srun started as task `task` of this cluster's jobs, or -1.
int task_pid(int task) {
  const std::string want_task = "SLURM_PROCID=" + std::to_string(task);
  const std::string want_conf = std::string("SLURM_CONF=") + slurm_conf();
  int found = -1;
  DIR* proc = opendir("/proc");
  while (dirent* e = proc ? readdir(proc) : nullptr) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    const std::string cmdline = file_text("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmdline.rfind(DPX_BINARY, 0) != 0) continue;
    const std::string env = file_text("/proc/" + std::to_string(pid) + "/environ");
    bool task_ok = false, conf_ok = false;
    for (size_t at = 0; at < env.size();) {
      const size_t end = std::min(env.find('\0', at), env.size());
      const std::string var = env.substr(at, end - at);
      task_ok = task_ok || var == want_task;
      conf_ok = conf_ok || var == want_conf;
      at = end + 1;
    }
    if (task_ok && conf_ok) found = pid;
  }
  if (proc) closedir(proc);
  return found;
}

}  // namespace

TEST_CASE("srun --mpi=pmix starts dpx's ranks as mpirun does: train, bench and collective give the same results") {
  slurm_conf();
  const dpx::testing::TempDir tmp("slurm_srun");
  const fs::path& d = tmp.path;
  for (int ranks : {2, 3}) {
    CAPTURE(ranks);
    const std::string n = std::to_string(ranks);
    DpxResult via_srun = train_under_both(d, ranks, "srun -n " + n + " --mpi=" DPX_SRUN_MPI, n);
    CAPTURE(via_srun.output);
    CHECK(via_srun.output.find("| launcher   | " + kSrunLauncher) != std::string::npos);
    CHECK(via_srun.output.find("| processes  | " + n + " MPI ranks on 1 node") != std::string::npos);
    const auto config = nlohmann::json::parse(file_text(d / ("out" + n) / "config.json"));
    CHECK(config["launch"]["launcher"] == kSrunLauncher);
    CHECK(config["launch"]["processes"] == ranks);
  }

  DpxResult c = run_command("srun -n 3 --mpi=" DPX_SRUN_MPI " " + std::string(DPX_BINARY) +
                            " collective --backend mpi --algo all -b 1K -e 64K -f 8 -n 2 -w 1");
  CAPTURE(c.output);
  CHECK(c.code == 0);
  CHECK(c.output.find("3 ranks (MPI processes on 1 node") != std::string::npos);
  CHECK(c.output.find("# Out of bounds values : 0 OK") != std::string::npos);
  CHECK(c.output.find("FAILED") == std::string::npos);

  DpxResult b = run_command("srun -n 2 --mpi=" DPX_SRUN_MPI " " + std::string(DPX_BINARY) +
                            " bench --models mlp --image-size 8 --channels 1 --batch-sizes 8 --steps 4 --warmup 1 "
                            "--devices cpu:1,2 --threads 1 --out " + (d / "bench").string());
  CAPTURE(b.output);
  CHECK(b.code == 0);
  const std::string results = file_text(d / "bench" / "results.csv");
  CHECK(results.find(",cpu:1,ddp,ring,1,") != std::string::npos);
  CHECK(results.find(",cpu:2,ddp,ring,2,") != std::string::npos);
}

TEST_CASE("srun without a PMI plugin is refused before MPI starts, with the advice") {
  slurm_conf();
  DpxResult r = run_command("srun -n 2 --mpi=none " + kTrain);
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("dpx: error: srun started 2 tasks (SLURM_STEP_NUM_TASKS) without a PMI plugin") != std::string::npos);
  CHECK(r.output.find("pass srun --mpi=" DPX_SRUN_MPI " ") != std::string::npos);
  CHECK(r.output.find("MPI_Init") == std::string::npos);  // refused before the library's own page
  // One task needs no plugin: dpx runs alone.
  DpxResult one = run_command("srun -n 1 " + kTrain);
  CAPTURE(one.output);
  CHECK(one.code == 0);
}

TEST_CASE("a task killed under srun ends the job with dpx's report naming it") {
  slurm_conf();
  const dpx::testing::TempDir tmp("slurm_kill");
  BackgroundJob job("srun -n 2 --mpi=" DPX_SRUN_MPI " " + std::string(DPX_BINARY) +
                        " train --model lenet5 --dataset synthetic --synthetic-size 200000 --batch-size 48 --epochs 1 "
                        "--threads 1 --workers 1 --log-interval 0 --no-eval --comm-timeout 3",
                    tmp.path / "kill.log");
  REQUIRE(job.wait_for_lines("| step ", 3, 60));
  const int pid = task_pid(1);
  REQUIRE(pid > 0);
  kill(pid, SIGKILL);  // as the kernel's OOM killer, or a node that fails, would
  const bool ended = job.finished(40);
  const std::string out = job.output();
  CAPTURE(out);
  job.kill_all();
  REQUIRE(ended);
  CHECK(job.exit_code() != 0);
  CHECK(out.find(": task 1: Killed") != std::string::npos);  // srun's line
  const bool reported = out.find("dpx: error: rank 1 (pid " + std::to_string(pid) + " on ") != std::string::npos &&
                        out.find("vanished") != std::string::npos;
  // dpx's rank 0 sees the process vanish at once (pidfd) and names it. The MPI library is told too,
  // through Slurm's PMIx or UCX, and may end rank 0 first: MPICH over UCX aborts the moment the
  // peer's memory vanishes mid-copy (process_vm_readv: No such process; docs/cluster.md, MPICH), and
  // slurmstepd's PMIx error handler cancels the step. The job then ends all the same, Slurm naming
  // the task; which came first is said here.
  const bool cancelled = out.find("process_vm_readv") != std::string::npos || out.find("CANCELLED") != std::string::npos;
  MESSAGE((reported ? "rank 0 named the vanished rank" : "the MPI library or Slurm ended rank 0 before it could speak"));
  CHECK((reported || cancelled));
}

TEST_CASE("sbatch runs a study to the end: its report and every file whole") {
  slurm_conf();
  const dpx::testing::TempDir tmp("slurm_sbatch");
  const fs::path& d = tmp.path;
  std::ofstream(d / "study.sbatch") << "#!/bin/bash\n#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=2\nexec " << DPX_BINARY
                                    << " study collectives --quick --out study\n";
  // --wait: sbatch returns when the job ends, with its exit status.
  DpxResult r = run_command("sbatch --wait --chdir " + d.string() + " --output " + (d / "job.log").string() + " " +
                            (d / "study.sbatch").string());
  const std::string log = file_text(d / "job.log");
  CAPTURE(r.output);
  CAPTURE(log);
  REQUIRE(r.code == 0);
  CHECK(log.find("dpx study collectives: done: study/report.html") != std::string::npos);
  const std::string report = file_text(d / "study" / "report.html");
  CHECK(report.find("</html>") != std::string::npos);
  for (const char* csv : {"all_reduce.csv", "broadcast.csv", "all_gather.csv", "reduce_scatter.csv", "all_to_all.csv"})
    CHECK(fs::file_size(d / "study" / csv) > 100);
  for (const auto& e : fs::recursive_directory_iterator(d / "study"))  // no temporary left behind
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
}

TEST_CASE("scripts/train.sbatch: stopped by SIGTERM, it requeues itself and resumes to an uninterrupted run's weights") {
  slurm_conf();
  const dpx::testing::TempDir tmp("slurm_requeue");
  const fs::path& d = tmp.path;
  // 1,500 steps, about 6 s on 2 ranks: long enough to be stopped in the middle. A progress line
  // every step (--log-interval 0 seconds) shows how far it is.
  const std::string args = "--model lenet5 --dataset synthetic --synthetic-size 24000 --batch-size 32 --epochs 2 "
                           "--seed 5 --threads 1 --workers 1 --no-eval --log-interval 0 --save ";
  DpxResult ref = run_command("srun -n 2 --mpi=" DPX_SRUN_MPI " " + std::string(DPX_BINARY) + " train " + args +
                              (d / "uninterrupted.safetensors").string());
  CAPTURE(ref.output);
  REQUIRE(ref.code == 0);

  // The job script as docs/cluster.md shows it; DPX names the binary and DPX_SRUN_MPI srun's PMI plugin
  // (sbatch exports both to the job).
  const std::string script = std::string(DPX_SOURCE_DIR) + "/scripts/train.sbatch";
  DpxResult submit = run_command("DPX=" + std::string(DPX_BINARY) + " DPX_SRUN_MPI=" DPX_SRUN_MPI " sbatch --parsable --chdir " + d.string() + " " +
                                 script + " " + args + (d / "requeued.safetensors").string());
  CAPTURE(submit.output);
  REQUIRE(submit.code == 0);
  const std::string job = submit.output.substr(0, submit.output.find_first_of(";\n"));
  const fs::path log = d / ("dpx-train-" + job + ".log");
  // Stopped once its first steps are done, as a time limit's --signal=TERM@120 or a pre-emption
  // would stop it; scancel --signal=TERM sends SIGTERM to the job's tasks.
  bool running = false;
  for (auto t = std::chrono::steady_clock::now(); !running && seconds_since(t) < 60;) {
    const std::string text = file_text(log);
    running = text.find("| step 50/750") != std::string::npos;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(running);
  REQUIRE(run_command("scancel --signal=TERM " + job).code == 0);
  // The requeued job may start again after AuthInfo's cred_expire (scripts/slurmcluster: 10 s).
  const std::string state = wait_for_job(job, 120);
  const std::string text = file_text(log);
  CAPTURE(text);
  CHECK(state == "COMPLETED");
  CHECK(job_field(job, "Restarts") == "1");
  CHECK(text.find("--resume auto: no checkpoint in checkpoints-" + job + " yet; starting from the first step") !=
        std::string::npos);
  // Rank 0 says so whether SIGTERM reached it first or the other rank's vote did (then only the
  // rank that took the signal announces it at once, and it does not speak for the node).
  CHECK(text.find("stopped by SIGTERM after ") != std::string::npos);
  CHECK(text.find("; checkpoint checkpoints-" + job + "/checkpoint-") != std::string::npos);
  CHECK(text.find("requeueing job " + job) != std::string::npos);
  CHECK(text.find("dpx-train: job " + job + ", restart 1") != std::string::npos);
  CHECK(text.find("resuming from checkpoints-" + job + "/checkpoint-") != std::string::npos);
  const std::string a = file_text(d / "uninterrupted.safetensors"), b = file_text(d / "requeued.safetensors");
  CHECK(a.size() > 1000);
  CHECK(a == b);
}

// Run by its own ctest entry, tools/test_slurm_nodes, under `scripts/slurmcluster run --nodes 2`
// (DPX_SLURM_NODES=2): two nodes of network namespaces, each its own host name and slurmd.
TEST_CASE("two nodes: srun across them trains mpirun's weights, and collective sees two nodes") {
  slurm_conf();
  const char* nodes = std::getenv("DPX_SLURM_NODES");
  if (!nodes || std::string(nodes) != "2") {
    MESSAGE("not under scripts/slurmcluster run --nodes 2 (tools/test_slurm_nodes runs this case)");
    return;
  }
  const dpx::testing::TempDir tmp("slurm_nodes");
  const fs::path& d = tmp.path;
  DpxResult across = train_under_both(d, 2, "srun -N 2 --ntasks-per-node=1 --mpi=" DPX_SRUN_MPI, "");
  CAPTURE(across.output);
  CHECK(across.output.find("| processes  | 2 MPI ranks on 2 nodes") != std::string::npos);
  const auto config = nlohmann::json::parse(file_text(d / "out" / "config.json"));
  CHECK(config["launch"]["nodes"] == 2);
  CHECK(config["launch"]["hosts"][0] != config["launch"]["hosts"][1]);

  DpxResult c = run_command("srun -N 2 --ntasks-per-node=2 --mpi=" DPX_SRUN_MPI " " + std::string(DPX_BINARY) +
                            " collective --backend mpi --algo all -b 1K -e 64K -f 8 -n 2 -w 1");
  CAPTURE(c.output);
  CHECK(c.code == 0);
  CHECK(c.output.find("4 ranks (MPI processes on 2 nodes") != std::string::npos);
  CHECK(c.output.find("# hier's nodes: {0, 1} {2, 3}") != std::string::npos);
  CHECK(c.output.find("FAILED") == std::string::npos);
}
#endif
