// Bad input that trying dpx as a careless user found, one test per class: each is refused with a
// message naming the flag and what to do (exit 2), before any work, instead of crashing, hanging,
// running on with nonsense, or destroying a user's file. And the divergence guard.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/data/idx.hpp"
#include "core/safetensors.hpp"
#include "mpi_run.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::TempDir;

namespace {

// A small run; --threads and --workers are the tests' to set.
const std::string kTrainAny = "train --model mlp --dataset synthetic --image-size 8 --channels 1 --synthetic-size 256 "
                              "--batch-size 16 --steps 4 --warmup 0 --no-eval ";
const std::string kTrain = kTrainAny + "--threads 1 --workers 0 ";

struct Case {
  std::string args, needle;
};

// Each runs, exits 2, and says `needle`; none got as far as training.
void check_refused(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const DpxResult r = run_dpx(c.args);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("dpx: error: " + c.needle) != std::string::npos);
    CHECK(r.output.find("| step ") == std::string::npos);
    CHECK(r.output.find("[1/") == std::string::npos);  // bench: not one configuration ran
  }
}

}  // namespace

TEST_CASE("--threads and --workers far beyond the machine are usage errors with the bound") {
  check_refused({
      {kTrainAny + "--threads 100000", "--threads 100000 is more than 16 per hardware thread of this machine"},
      {kTrainAny + "--workers 100000", "--workers 100000 is more than 256 loader threads per rank"},
      {"bench --models mlp --threads 100000", "--threads 100000 is more than 16 per hardware thread"},
  });
}

TEST_CASE("collective --ranks beyond what the CPUs can run in reasonable time is refused at once, with the reason") {
  check_refused({{"collective --ranks 1024", "--ranks 1024 is more than 32 thread ranks per CPU of this process"}});
}

TEST_CASE("infer --output that names an input file is refused, and the file is kept") {
  const TempDir tmp("infer_output");
  const std::string weights = tmp.file("w.safetensors"), images = tmp.file("x.safetensors");
  REQUIRE(run_dpx(kTrain + "--save " + weights).code == 0);
  dpx::write_safetensors(images, {{"images", dpx::Tensor::zeros({2, 1, 8, 8})}});
  const std::string before_w = file_text(weights), before_x = file_text(images);
  const std::string infer = "infer --model mlp --weights " + weights + " --input " + images + " --output ";
  check_refused({{infer + images, "--output '" + images + "' is the file --input reads"},
                 {infer + weights, "--output '" + weights + "' is the file --weights reads"},
                 {infer + tmp.file("./x.safetensors"),  // the same file, spelt otherwise
                  "--output '" + tmp.file("./x.safetensors") + "' is the file --input reads"}});
  CHECK(file_text(weights) == before_w);
  CHECK(file_text(images) == before_x);
}

TEST_CASE("bench checks every configuration before running the first") {
  const std::string bench = "bench --batch-sizes 8 --steps 4 --warmup 1 --devices cpu:1 --threads 1 --models ";
  check_refused({
      {bench + "mlp,nosuch", "unknown model 'nosuch'"},
      {bench + "mlp,alexnet", "alexnet needs an input of at least 63x63 (the data is 28x28)"},
      {"bench --models mlp --batch-sizes 8,100000 --synthetic-size 1000 --steps 4 --warmup 1",
       "the training set has 1000 samples: too few for 1 rank(s) x a batch of 100000 per rank"},
  });
}

TEST_CASE("negative numbers for unsigned flags, and --warmup that leaves nothing to measure, are usage errors") {
  check_refused({
      {"collective -f -2", "--stepfactor: -2 is negative: give a whole number of 0 or more"},
      {kTrain + "--seed -1", "--seed: -1 is negative: give a whole number of 0 or more"},
      {"train --model mlp --dataset synthetic --steps 3 --warmup 3", "--warmup 3 would exclude all 3 steps"},
      {"bench --models mlp --steps 2 --warmup 5", "--warmup 5 would exclude all 2 steps"},
  });
}

TEST_CASE("non-finite numbers are usage errors") {
  check_refused({
      {kTrain + "--momentum nan", "--momentum must be a finite number (got nan)"},
      {kTrain + "--label-smoothing nan", "--label-smoothing must be a finite number"},
      {kTrain + "--devices cpu:2 --parallel ddp --bucket-mb nan", "--bucket-mb must be a finite number"},
      {kTrain + "--lr nan", "--lr must be a positive number (got nan)"},
      {kTrain + "--lr inf", "--lr must be a positive number (got inf)"},
      {kTrain + "--loss-threshold inf", "--loss-threshold must be a finite number"},
      {kTrain + "--comm-timeout nan", "--comm-timeout must be a finite number"},
      {"collective --link-gbps nan", "--link-gbps: nan is not a rate"},
  });
}

TEST_CASE("an output that cannot be written fails before training, naming its flag") {
  const TempDir tmp("outputs");
  std::ofstream(tmp.file("afile")) << "x";  // a file where a folder would have to be
  const std::string under = tmp.file("afile") + "/sub/";
  for (const Case& c : std::vector<Case>{
           {kTrain + "--save " + under + "w.safetensors", "(--save): Not a directory"},
           {kTrain + "--trace " + under + "t.json", "(--trace): Not a directory"},
           {kTrain + "--out " + under, "(--out): Not a directory"},
           {kTrain + "--checkpoint-dir " + under, "(--checkpoint-dir): Not a directory"},
           {"collective -b 1K -e 1K --csv " + under + "c.csv", "(--csv): Not a directory"},
       }) {
    CAPTURE(c.args);
    const DpxResult r = run_dpx(c.args);
    CAPTURE(r.output);
    CHECK(r.code == 1);
    CHECK(r.output.find(c.needle) != std::string::npos);
    CHECK(r.output.find("| step ") == std::string::npos);  // checked before training
  }
}

TEST_CASE("train and test images of different sizes are refused when the data is loaded") {
  const TempDir tmp("idx_sizes");
  auto images = [](int64_t n, int64_t side) {
    dpx::Tensor t = dpx::Tensor::zeros({n, side, side}, dpx::DType::u8);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(i % 251);
    return t;
  };
  auto labels = [](int64_t n) {
    dpx::Tensor t = dpx::Tensor::zeros({n}, dpx::DType::u8);
    for (int64_t i = 0; i < n; ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(i % 10);
    return t;
  };
  using dpx::data::IdxType;
  dpx::data::write_idx(tmp.file("train-images-idx3-ubyte"), images(64, 28), IdxType::u8);
  dpx::data::write_idx(tmp.file("train-labels-idx1-ubyte"), labels(64), IdxType::u8);
  dpx::data::write_idx(tmp.file("t10k-images-idx3-ubyte"), images(16, 20), IdxType::u8);
  dpx::data::write_idx(tmp.file("t10k-labels-idx1-ubyte"), labels(16), IdxType::u8);
  check_refused({{"train --model mlp --dataset mnist --batch-size 8 --threads 1 --data-dir " + tmp.path.string(),
                  "the test images are (1, 20, 20) but the training images are (1, 28, 28)"}});
}

TEST_CASE("a second run into the same --out is refused while the first one writes there") {
  const TempDir tmp("lock");
  BackgroundJob first(std::string(DPX_BINARY) +
                          " train --model lenet5 --dataset synthetic --synthetic-size 100000 --batch-size 16 "
                          "--threads 1 --no-eval --log-interval 0 --out " + tmp.file("out"),
                      tmp.file("first.log"));
  REQUIRE(first.wait_for_lines("| step ", 3, 60));
  const DpxResult second = run_dpx(kTrain + "--out " + tmp.file("out"));
  CAPTURE(second.output);
  CHECK(second.code == 2);
  CHECK(second.output.find("dpx: error: another dpx run (pid ") != std::string::npos);
  CHECK(second.output.find("is writing into " + tmp.file("out") + " (--out): wait for it to end, or pass another --out") !=
        std::string::npos);
  first.signal_job(SIGKILL);
  REQUIRE(first.finished(30));
  CHECK(run_dpx(kTrain + "--out " + tmp.file("out")).code == 0);  // a killed writer's lock is gone with it
}

// Freezing the whole job (SIGSTOP to every rank, a scheduler's suspend) longer than --comm-timeout
// is no stall: nobody was late. It was reported as one (issue 28).
TEST_CASE("a job frozen for longer than --comm-timeout goes on after it is continued, and says it was frozen") {
  const TempDir tmp("frozen");
  BackgroundJob job(std::string(DPX_BINARY) +
                        " train --model lenet5 --dataset synthetic --synthetic-size 2000000 --batch-size 16 --steps 4000 "
                        "--threads 1 --workers 1 --devices cpu:2 --parallel ddp --no-eval --comm-timeout 1 --out " +
                        tmp.file("out"),
                    tmp.file("job.log"));
  REQUIRE(job.wait_for_lines("| step ", 2, 60));
  for (int freeze = 0; freeze < 3; ++freeze) {  // three freezes of 3 s: the ranks wait in most of them
    REQUIRE(kill(job.pid(), SIGSTOP) == 0);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    REQUIRE(kill(job.pid(), SIGCONT) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  job.signal_job(SIGTERM);  // stops after an agreed step, as a scheduler's end
  REQUIRE(job.finished(60));
  const std::string out = job.output();
  CAPTURE(out);
  CHECK(out.find("stall:") == std::string::npos);  // no stall report
  CHECK(out.find("dpx: error") == std::string::npos);
  CHECK(out.find("dpx: this process was frozen for ") != std::string::npos);
  CHECK(out.find("not hung") != std::string::npos);
  CHECK(out.find("stopped by SIGTERM") != std::string::npos);
  CHECK(job.exit_code() == 128 + SIGTERM);
}

TEST_CASE("threads the system refuses are a usage error naming --threads and the limits, not libgomp's exit") {
#ifdef DPX_SANITIZE
  MESSAGE("skipped under AddressSanitizer: it cannot run with a limited address space (ulimit -v)");
  return;
#endif
  // Stacks of 1 GB each (ulimit -s) in 8 GB of address space (ulimit -v): 32 threads do not fit.
  const DpxResult r = run_command("sh -c 'ulimit -s 1000000; ulimit -v 8000000; exec " + std::string(DPX_BINARY) +
                                  " train --model lenet5 --dataset synthetic --synthetic-size 64 --batch-size 16 "
                                  "--steps 1 --warmup 0 --no-eval --threads 32'");
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("dpx: error: --threads 32 with --workers 2 needs 34 threads at once, but the system refused "
                      "thread ") != std::string::npos);
  CHECK(r.output.find("ulimit -s (kB of stack per thread): 1000000") != std::string::npos);
  CHECK(r.output.find("libgomp") == std::string::npos);
}

TEST_CASE("running out of memory is an error that says what to lower") {
#ifdef DPX_SANITIZE
  // AddressSanitizer reserves terabytes of shadow address space: no ASan binary starts under ulimit -v.
  MESSAGE("skipped under AddressSanitizer: it cannot run with a limited address space (ulimit -v)");
  return;
#endif
  // 1.5 GB of address space: enough to start (the CUDA libraries map large regions), too little
  // for a VGG's activations at this batch.
  const DpxResult r = run_command("sh -c 'ulimit -v 1500000; exec " + std::string(DPX_BINARY) +
                                  " train --model vgg11 --image-size 64 --channels 3 --dataset synthetic "
                                  "--synthetic-size 512 --batch-size 64 --steps 2 --warmup 0 --no-eval --threads 1'");
  CAPTURE(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("dpx: error: out of ") != std::string::npos);
  CHECK(r.output.find("lower --batch-size") != std::string::npos);
}

TEST_CASE("the divergence guard stops, skips or ignores a non-finite loss or gradient") {
  const std::string diverging = kTrain + "--lr 1e20 ";
  DpxResult stop = run_dpx(diverging);
  CAPTURE(stop.output);
  CHECK(stop.code == 1);
  // The first step's loss is finite; its update with lr 1e20 makes the second one's NaN.
  CHECK(stop.output.find("dpx: error: non-finite loss (") != std::string::npos);
  CHECK(stop.output.find(") and gradients at step 2 (first in ") != std::string::npos);
  CHECK(stop.output.find("; lower --lr, or pass --on-nonfinite skip") != std::string::npos);
  DpxResult ddp = run_dpx(diverging + "--devices cpu:2 --parallel ddp");
  CAPTURE(ddp.output);
  CHECK(ddp.code == 1);
  CHECK(ddp.output.find("gradients at step 2 (first in ") != std::string::npos);
  CHECK(ddp.output.find("after the all-reduce: every rank has them); lower --lr") != std::string::npos);
  DpxResult skip = run_dpx(diverging + "--on-nonfinite skip");
  CHECK(skip.code == 0);
  CHECK(skip.output.find("dpx: warning: non-finite loss (") != std::string::npos);
  CHECK(skip.output.find("gradients at step 2 (first in ") != std::string::npos);
  CHECK(skip.output.find("update skipped (--on-nonfinite skip)") != std::string::npos);
  DpxResult ignore = run_dpx(diverging + "--on-nonfinite ignore");
  CHECK(ignore.code == 0);
  CHECK(ignore.output.find("non-finite") == std::string::npos);
  check_refused({{kTrain + "--on-nonfinite maybe", "--on-nonfinite: unknown choice 'maybe'"}});

  // A weight file holding a NaN is refused, naming the tensor; --on-nonfinite ignore loads it.
  const TempDir tmp("nan_weights");
  REQUIRE(run_dpx(kTrain + "--save " + tmp.file("w.safetensors")).code == 0);
  dpx::SafeTensors st = dpx::read_safetensors(tmp.file("w.safetensors"));
  std::vector<std::pair<std::string, dpx::Tensor>> tensors = st.tensors;
  tensors[1].second.data<float>()[3] = std::nanf("");
  dpx::write_safetensors(tmp.file("nan.safetensors"), tensors, st.metadata);
  DpxResult nan = run_dpx(kTrain + "--weights " + tmp.file("nan.safetensors"));
  CAPTURE(nan.output);
  CHECK(nan.code == 1);
  CHECK(nan.output.find("--weights " + tmp.file("nan.safetensors") + ": '" + tensors[1].first +
                        "' holds 1 NaN or infinite value") != std::string::npos);
  CHECK(run_dpx(kTrain + "--on-nonfinite ignore --weights " + tmp.file("nan.safetensors")).code == 0);
}
