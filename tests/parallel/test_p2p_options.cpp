// The p2p backend's parts that run without a GPU: the --gpus list, where ranks go, dpx train's
// --backend p2p options, and the refusal with a message that names the flag and what to do where
// no GPU (or no CUDA) is present. Its collectives themselves are tested on a GPU (tests/cuda/test_p2p.cpp).
#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/error.hpp"
#include "parallel/bench/collective_bench.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"
#include "parallel/train/train_options.hpp"
#include "tests/common/errors.hpp"
#include "tests/parallel/small_job.hpp"

using namespace dpx;
using namespace dpx::parallel;

TEST_CASE("--gpus parses GPU numbers separated by commas and names itself in errors") {
  CHECK(parse_gpu_list("").empty());
  CHECK(parse_gpu_list("0") == std::vector<int>{0});
  CHECK(parse_gpu_list("0,1,3") == std::vector<int>{0, 1, 3});
  for (const char* bad : {"x", "0,", ",1", "0,,1", "-1", "1.5", "0 1"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(parse_gpu_list(bad), doctest::Contains("--gpus: '"), UsageError);
  }
}

TEST_CASE("--backend p2p without a usable GPU is refused, naming the flag and what to do") {
  if (!p2p_unavailable_reason().empty()) {
    CollectiveOptions o;
    o.backend = "p2p";
    CHECK_THROWS_WITH_AS(validate(o), doctest::Contains("--backend p2p: "), UsageError);
    std::ostringstream out;
    CHECK_THROWS_AS(run_collective(o, out), UsageError);
    CHECK_THROWS_WITH_AS(run_p2p_ranks({0}, [](Communicator&, Communicator&, int) {}),
                         doctest::Contains("--backend p2p: "), UsageError);
    CHECK_THROWS_WITH_AS(p2p_rank_devices(2, {}), doctest::Contains("--backend p2p needs a GPU"), UsageError);
    if (!kP2PBuilt) CHECK(p2p_unavailable_reason().find("-DDPX_CUDA=ON") != std::string::npos);
    else CHECK(p2p_unavailable_reason().find("needs a GPU") != std::string::npos);
  } else {  // a GPU machine: ranks go round the GPUs listed
    CHECK(p2p_rank_devices(3, {0}) == std::vector<int>{0, 0, 0});
    CHECK_THROWS_WITH_AS(p2p_rank_devices(2, {cuda::device_count()}), doctest::Contains("does not exist"), UsageError);
  }
}

TEST_CASE("--gpus is refused with a backend other than p2p") {
  CollectiveOptions o;
  o.gpus = "0";
  CHECK_THROWS_WITH_AS(validate(o), doctest::Contains("--gpus: only with --backend p2p"), UsageError);
}

namespace {

using dpx::testing::contains;
using dpx::testing::usage_error_of;

// The usage error validate() gives a p2p DDP job on two replicas of GPU 0 after `change`, or "".
std::string train_error(void (*change)(TrainOptions&)) {
  return dpx::testing::ddp_options_error("cuda:0,cuda:0", "p2p", change);
}

}  // namespace

TEST_CASE("dpx train --backend p2p: replicas may share a GPU; what it cannot do is refused with what to do") {
  if (!kP2PBuilt) {
    CHECK(contains(train_error([](TrainOptions&) {}), "--backend p2p: this dpx was built without CUDA"));
    return;
  }
  CHECK(train_error([](TrainOptions&) {}).empty());
  TrainOptions two;
  two.devices = "cuda:0,cuda:0,cuda:1";
  two.backend = Backend::p2p;
  CHECK(two.cuda_devices() == std::vector<int>{0, 0, 1});  // several replicas on GPU 0
  CHECK(two.ranks() == 3);
  two.backend = Backend::nccl;  // NCCL runs one rank per GPU
  CHECK_THROWS_WITH_AS(two.cuda_devices(), doctest::Contains("cuda:0 is named twice"), UsageError);
  CHECK(train_error([](TrainOptions& o) { o.algo = Algorithm::tree; }).empty());
  CHECK(contains(train_error([](TrainOptions& o) { o.devices = "cpu:2"; }), "--backend p2p runs thread ranks on GPUs"));
  CHECK(contains(train_error([](TrainOptions& o) { o.parallel = ParallelMode::none; }), "pass --parallel ddp"));
  CHECK(contains(train_error([](TrainOptions& o) { o.grad_dtype = DType::bf16; }), "--grad-dtype bf16 with --backend p2p"));
  CHECK(contains(train_error([](TrainOptions& o) { o.checkpoint_dir = "ck"; }), "--checkpoint-dir with --backend p2p"));
  CHECK(contains(train_error([](TrainOptions& o) { o.algo = Algorithm::nccl; }), "p2p runs dpx's own algorithms"));
  // --backend is parsed where the command line comes in, naming what it takes.
  CHECK(contains(usage_error_of([] { parse_choice(kBackends, "p2q", "--backend", "backend"); }), "nccl or p2p"));
  CHECK(contains(train_error([](TrainOptions& o) { o.backend.reset(); o.devices = "cuda:0,cuda:1"; }), "or --backend p2p"));
  CHECK(contains(train_error([](TrainOptions& o) { o.backend.reset(); }), "cuda:0 is named twice"));
}
