// Checkpoints and resume, end to end: a run resumed from any of its checkpoints ends with the same
// weights (byte for byte) and the same steps.csv rows as the run that was never stopped — one
// replica with SGD, AdamW, accumulation and dropout, DDP over thread ranks, DDP over MPI
// processes, across an epoch boundary; a SIGTERM stops a run at a step every rank agrees on,
// checkpoints and exits 143, and the resumed run finishes it alike; a second signal stops at once;
// a checkpoint of another run, or a damaged one, is refused with what is wrong.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mpi_run.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::TempDir;

namespace {

const std::string kDpx = std::string(DPX_BINARY) + " ";

// The columns of steps.csv that a resumed run must reproduce: rank, epoch, step, global step,
// loss, images, bytes sent, optimizer step (the times are the run's own).
std::vector<std::string> deterministic_rows(const fs::path& steps_csv) {
  std::vector<std::string> rows;
  std::istringstream in(file_text(steps_csv));
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    if (cells.size() < 17) continue;
    rows.push_back(cells[0] + "," + cells[1] + "," + cells[2] + "," + cells[3] + "," + cells[4] + "," + cells[14] +
                   "," + cells[15] + "," + cells[16]);
  }
  return rows;
}

void check_same(const fs::path& full, const fs::path& resumed) {
  CHECK(file_text(full / "w.safetensors") == file_text(resumed / "w.safetensors"));  // byte for byte
  const auto a = deterministic_rows(full / "steps.csv"), b = deterministic_rows(resumed / "steps.csv");
  CHECK(a.size() > 1);
  CHECK(a == b);
}

DpxResult train(const std::string& launch, const std::string& args, const fs::path& out, const std::string& extra) {
  DpxResult r = run_command(launch + kDpx + args + " --out " + out.string() + " --save " + (out / "w.safetensors").string() +
                            " " + extra);
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  return r;
}

std::string checkpoint_file(const fs::path& dir, int step) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%09d.safetensors", step);
  return (dir / name).string();
}

// A small run; every flag the tests vary is left out of kCommon.
const std::string kCommon = "train --synthetic-size 512 --steps 10 --batch-size 24 --threads 1 --workers 1 --warmup 0 "
                            "--no-eval --log-interval 1000 ";
const std::string kSmall = kCommon + "--dataset synthetic --epochs 2 --seed 7 ";

}  // namespace

TEST_CASE("a run resumed from a checkpoint ends exactly as the run that never stopped") {
  struct Case {
    std::string launch, args;
    int resume_at;  // a checkpoint before the epoch boundary (step 10): the resumed run crosses it
  };
  std::vector<Case> cases = {
      {"", "--model mlp --image-size 8 --channels 1", 4},
      {"", "--model mlp --image-size 8 --channels 1 --optimizer adamw", 8},
      {"", "--model mlp --image-size 8 --channels 1 --accumulate 3", 6},      // checkpoints at group ends
      {"", "--model squeezenet1_1 --image-size 32 --channels 3", 4},          // dropout: random streams
      {"", "--model mlp --image-size 8 --channels 1 --devices cpu:2 --parallel ddp", 8},
      {"", "--model mlp --image-size 8 --channels 1 --devices cpu:3 --parallel ddp --optimizer adamw --accumulate 2", 4},
  };
#ifdef DPX_MPIEXEC
  cases.push_back({mpirun(2), "--model mlp --image-size 8 --channels 1", 4});
  cases.push_back({mpirun(2), "--model squeezenet1_1 --image-size 32 --channels 3 --optimizer adamw --accumulate 2", 8});
#endif
  for (const Case& c : cases) {
    CAPTURE(c.launch);
    CAPTURE(c.args);
    const TempDir tmp("resume");
    const fs::path ckpt = tmp.path / "ckpt";
    train(c.launch, kSmall + c.args, tmp.path / "full",
          "--checkpoint-dir " + ckpt.string() + " --checkpoint-every 4 --keep 10");
    REQUIRE(fs::exists(checkpoint_file(ckpt, c.resume_at)));
    DpxResult r = train(c.launch, kSmall + c.args, tmp.path / "resumed", "--resume " + checkpoint_file(ckpt, c.resume_at));
    CHECK(r.output.find("resuming from " + checkpoint_file(ckpt, c.resume_at)) != std::string::npos);
    check_same(tmp.path / "full", tmp.path / "resumed");
  }
}

// Augmentation draws from (seed, epoch, sample index) alone, so a run over an image folder resumes
// bit for bit too: the resumed run crops and flips the remaining samples as the full run did.
TEST_CASE("a run over an image folder, with random crops and flips, resumes exactly as it never stopped") {
  const TempDir tmp("resume_images");
  const fs::path imgs = tmp.path / "imgs";
  DpxResult made = run_command(kDpx + "data make-imagefolder " + imgs.string() + " --classes 4 --per-class 20 --size 48x40");
  CAPTURE(made.output);
  REQUIRE(made.code == 0);
  const std::string args = "train --model mlp --dataset imagefolder --data-dir " + imgs.string() +
                           " --image-size 16 --batch-size 8 --steps 10 --epochs 2 --seed 7 --threads 1 --workers 2 "
                           "--warmup 0 --no-eval --log-interval 1000";
  const fs::path ckpt = tmp.path / "ckpt";
  train("", args, tmp.path / "full", "--checkpoint-dir " + ckpt.string() + " --checkpoint-every 4 --keep 10");
  REQUIRE(fs::exists(checkpoint_file(ckpt, 8)));
  train("", args, tmp.path / "resumed", "--resume " + checkpoint_file(ckpt, 8));
  check_same(tmp.path / "full", tmp.path / "resumed");
}

TEST_CASE("--keep keeps the newest checkpoints, and --resume of the folder takes the newest") {
  const TempDir tmp("keep");
  const fs::path ckpt = tmp.path / "ckpt";
  train("", kSmall + "--model mlp --image-size 8 --channels 1", tmp.path / "full",
        "--checkpoint-dir " + ckpt.string() + " --checkpoint-every 3 --keep 2");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(ckpt))
    if (e.path().filename() != ".dpx.lock") files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"checkpoint-000000018.safetensors", "checkpoint-000000020.safetensors"});
  // The newest is the end of the run: resuming from it trains nothing and changes nothing.
  train("", kSmall + "--model mlp --image-size 8 --channels 1", tmp.path / "resumed", "--resume " + ckpt.string());
  check_same(tmp.path / "full", tmp.path / "resumed");
}

// --resume auto: one command for the first run and every restart (a requeued Slurm job).
TEST_CASE("--resume auto starts where --checkpoint-dir holds no checkpoint and continues from its newest") {
  const TempDir tmp("resume_auto");
  const fs::path ckpt = tmp.path / "ckpt";
  const std::string args = kSmall + "--model mlp --image-size 8 --channels 1 --checkpoint-dir " + ckpt.string() +
                           " --checkpoint-every 4 --keep 10 --resume auto";
  DpxResult first = train("", args, tmp.path / "full", "");
  CHECK(first.output.find("--resume auto: no checkpoint in " + ckpt.string() + " yet; starting from the first step") !=
        std::string::npos);
  // A restart after step 8: the later checkpoints were never written.
  for (int step : {10, 12, 16, 20}) CHECK(fs::remove(checkpoint_file(ckpt, step)));  // 10: the epoch's end
  DpxResult again = train("", args, tmp.path / "resumed", "");
  CHECK(again.output.find("resuming from " + checkpoint_file(ckpt, 8)) != std::string::npos);
  check_same(tmp.path / "full", tmp.path / "resumed");

  DpxResult alone = run_command(kDpx + kSmall + "--model mlp --image-size 8 --channels 1 --resume auto");
  CAPTURE(alone.output);
  CHECK(alone.code == 2);
  CHECK(alone.output.find("--resume auto continues from the newest checkpoint in --checkpoint-dir: pass "
                          "--checkpoint-dir too") != std::string::npos);
}

TEST_CASE("SIGTERM: the run stops at a step, checkpoints, exits 143, and the resumed run finishes it alike") {
  const std::string args =
      "train --model lenet5 --dataset synthetic --synthetic-size 100000 --steps 400 --epochs 2 --batch-size 24 "
      "--seed 7 --threads 1 --workers 1 --warmup 0 --no-eval --log-interval 0 ";
  struct Case {
    std::string launch, args;
    bool one_rank;  // signal rank 1 only (MPI): the others learn it through the vote
  };
  std::vector<Case> cases = {{"", "", false}, {"", "--devices cpu:2 --parallel ddp", false}};
#ifdef DPX_MPIEXEC
  cases.push_back({mpirun(2), "", true});
#endif
  for (const Case& c : cases) {
    CAPTURE(c.launch);
    CAPTURE(c.args);
    const TempDir tmp("sigterm");
    const fs::path ckpt = tmp.path / "ckpt";
    {
      BackgroundJob run(c.launch + kDpx + args + c.args + " --out " + (tmp.path / "part").string() +
                            " --checkpoint-dir " + ckpt.string(),
                        tmp.path / "part.log");
      REQUIRE(run.wait_for_lines("| step ", 100, 60));  // long enough a run to measure the machine
      if (c.launch.empty()) {
        run.signal_job(SIGTERM);  // the dpx process itself (thread ranks share its signals)
      } else {
        const int pid = run.rank_pid(1);
        REQUIRE(pid > 0);
        kill(pid, SIGTERM);
      }
      REQUIRE(run.finished(60));
      CAPTURE(run.output());
      CHECK(run.exit_code() == 143);
      CHECK(run.output().find("stopped by SIGTERM after ") != std::string::npos);
      // A run stopped before an epoch ended still says what other processes took of its cores.
      CHECK(run.output().find("machine: other processes took ") != std::string::npos);
      CHECK(run.output().find("resume with the same command and --resume " + ckpt.string()) != std::string::npos);
    }
    for (const auto& e : fs::directory_iterator(tmp.path / "part"))  // whole files only
      CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
    const DpxResult resumed = run_command(c.launch + kDpx + args + c.args + " --resume " + ckpt.string() + " --out " +
                                          (tmp.path / "resumed").string() + " --save " +
                                          (tmp.path / "resumed" / "w.safetensors").string());
    CAPTURE(resumed.output);
    REQUIRE(resumed.code == 0);
    train(c.launch, args + c.args, tmp.path / "full", "");
    check_same(tmp.path / "full", tmp.path / "resumed");
  }
}

TEST_CASE("a second signal stops at once, and leaves no temporary file") {
  const TempDir tmp("second");
  // Steps of a second or so, so that the second signal lands inside the step the first one lets end.
  BackgroundJob run(kDpx +
                        "train --model resnet18 --image-size 64 --channels 3 --dataset synthetic --batch-size 32 "
                        "--threads 1 --workers 1 --no-eval --log-interval 0 --checkpoint-dir " +
                        (tmp.path / "ckpt").string() + " --out " + (tmp.path / "out").string(),
                    tmp.path / "log");
  REQUIRE(run.wait_for_lines("| step ", 2, 120));
  run.signal_job(SIGINT);
  REQUIRE(run.wait_for_lines("stopping at the end of the current step", 1, 10));
  run.signal_job(SIGINT);  // after the first has landed: two pending signals would merge into one
  REQUIRE(run.finished(30));
  CAPTURE(run.output());
  CHECK(run.exit_code() == 130);
  CHECK(run.output().find("dpx: SIGINT again: stopped at once") != std::string::npos);
  for (const auto& dir : {tmp.path / "ckpt", tmp.path / "out"})
    if (fs::exists(dir))
      for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("a checkpoint of another run, or a damaged one, is refused with what is wrong") {
  const TempDir tmp("refused");
  const fs::path ckpt = tmp.path / "ckpt";
  const std::string base = kSmall + "--image-size 8 --channels 1 ";
  train("", base + "--model mlp", tmp.path / "full", "--checkpoint-dir " + ckpt.string());
  struct Case {
    std::string args, needle;
  };
  const std::string other = kCommon + "--image-size 8 --channels 1 --model mlp --epochs 2 ";
  const std::vector<Case> cases = {
      {base + "--model lenet5", "--model is mlp in the checkpoint and lenet5 here"},
      {base + "--model mlp --optimizer adamw", "--optimizer is sgd in the checkpoint and adamw here"},
      {base + "--model mlp --devices cpu:2 --parallel ddp", "the number of ranks is 1 in the checkpoint and 2 here"},
      {other + "--seed 7 --dataset fashion-mnist", "--dataset is synthetic in the checkpoint and fashion-mnist here"},
      {other + "--dataset synthetic --seed 8", "--seed is 7 in the checkpoint and 8 here"},
  };
  for (const Case& c : cases) {
    DpxResult r = run_dpx(c.args + " --resume " + ckpt.string());
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.needle) != std::string::npos);
  }
  // A file that is not a checkpoint, a truncated one, a folder without one, nothing at all.
  train("", kCommon + "--dataset synthetic --seed 7 --image-size 8 --channels 1 --model mlp --epochs 1",
        tmp.path / "weights", "");
  DpxResult weights = run_dpx(base + "--model mlp --resume " + (tmp.path / "weights" / "w.safetensors").string());
  CHECK(weights.code == 1);
  CHECK(weights.output.find("its metadata has no 'dpx_checkpoint'") != std::string::npos);
  const std::string whole = file_text(checkpoint_file(ckpt, 20));
  std::ofstream(tmp.path / "cut.safetensors", std::ios::binary) << whole.substr(0, whole.size() / 2);
  DpxResult cut = run_dpx(base + "--model mlp --resume " + (tmp.path / "cut.safetensors").string());
  CHECK(cut.code == 1);
  CHECK(cut.output.find("dpx: error: --resume: " + tmp.path.string() + "/cut.safetensors") != std::string::npos);
  fs::create_directories(tmp.path / "empty");
  DpxResult empty = run_dpx(base + "--model mlp --resume " + (tmp.path / "empty").string());
  CHECK(empty.code == 2);
  CHECK(empty.output.find("the folder holds no dpx checkpoint (checkpoint-<step>.safetensors)") != std::string::npos);
  DpxResult none = run_dpx(base + "--model mlp --resume " + (tmp.path / "nowhere").string());
  CHECK(none.code == 2);
  CHECK(none.output.find("no such file or folder") != std::string::npos);
}
