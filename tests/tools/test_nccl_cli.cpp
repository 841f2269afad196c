// `--backend nccl` end to end on a machine without GPUs (every CPU CI run): dpx collective and
// dpx train exit 2 with a message that names --backend nccl and says what to do, whether dpx was
// built without CUDA (configure with -DDPX_CUDA=ON) or with it (no usable CUDA device). On a GPU
// machine these commands run; tests/cuda/test_nccl.cpp and scripts/gpu check them there.
#include <doctest/doctest.h>

#include <string>

#include "core/cuda/memory.hpp"
#include "parallel/comm/algorithms/algorithms.hpp"
#include "run_dpx.hpp"

namespace {

const std::string kTrain = "train --model mlp --dataset synthetic --image-size 8 --channels 1 --synthetic-size 64 "
                           "--batch-size 8 --steps 4 --warmup 0 --no-eval --epochs 1 --threads 1 --parallel ddp ";

void check_refused(const std::string& args) {
  const DpxResult r = run_dpx(args);
  CAPTURE(args);
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("--backend nccl") != std::string::npos);
  if (dpx::parallel::kNcclBuilt) {
    CHECK(r.output.find("no usable CUDA device") != std::string::npos);
    CHECK(r.output.find("or use CPU ranks here") != std::string::npos);
  }
  else CHECK(r.output.find("configure with -DDPX_CUDA=ON") != std::string::npos);
}

}  // namespace

TEST_CASE("dpx collective --backend nccl without a GPU exits 2 and says why") {
  if (dpx::cuda::available()) return;  // a GPU machine runs it (scripts/gpu)
  check_refused("collective --backend nccl --ranks 2 -b 1K -e 1K -n 1 -w 0");
}

TEST_CASE("dpx train --backend nccl without a GPU exits 2 and says why") {
  if (dpx::cuda::available()) return;
  check_refused(kTrain + "--backend nccl --devices cuda:0,cuda:1");
}

TEST_CASE("dpx train: DDP over GPUs without --backend nccl is refused, naming the flag") {
  const DpxResult r = run_dpx(kTrain + "--devices cuda:0,cuda:1");
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("add --backend nccl") != std::string::npos);
}
