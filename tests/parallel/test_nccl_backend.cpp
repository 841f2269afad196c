// The nccl backend's parts that need no GPU, checked on the CPU in every build: the watchdog's
// decision (nccl_wait.hpp), which GPU a rank drives, the --backend nccl option checks and their
// refusals, the algorithm name, and in CUDA builds the mapping of dtypes and reductions to NCCL's
// and the clear error where no GPU is present. What runs NCCL itself is tests/cuda/test_nccl.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/error.hpp"
#include "parallel/comm/algorithms/algorithms.hpp"
#include "parallel/comm/nccl/nccl_backend.hpp"
#include "parallel/comm/nccl/nccl_wait.hpp"
#include "parallel/train/train_options.hpp"
#include "tests/common/errors.hpp"
#include "tests/parallel/small_job.hpp"
#ifdef DPX_WITH_CUDA
#include "parallel/comm/nccl/cuda/nccl_types.hpp"
#endif

using namespace dpx;
using namespace dpx::parallel;
using nccl::judge_wait;
using nccl::NcclProbe;
using nccl::NcclWaitVerdict;

using dpx::testing::contains;
using dpx::testing::usage_error_of;

TEST_CASE("the nccl watchdog: errors first, then completion, then the timeout; patient waits never time out") {
  NcclProbe idle;
  idle.stream_idle = true;
  CHECK(judge_wait(idle, 0.0, 10) == NcclWaitVerdict::done);
  CHECK(judge_wait(idle, 99.0, 10) == NcclWaitVerdict::done);  // finished just as the timeout passed: no stall

  NcclProbe busy;
  CHECK(judge_wait(busy, 1.0, 10) == NcclWaitVerdict::pending);
  CHECK(judge_wait(busy, 10.0, 10) == NcclWaitVerdict::timed_out);
  CHECK(judge_wait(busy, 1e6, 0) == NcclWaitVerdict::pending);  // patient (barrier while rank 0 evaluates)

  NcclProbe init = idle;  // a non-blocking communicator still initialising: its stream says nothing
  init.comm_in_progress = true;
  CHECK(judge_wait(init, 1.0, 10) == NcclWaitVerdict::pending);
  CHECK(judge_wait(init, 11.0, 10) == NcclWaitVerdict::timed_out);

  NcclProbe failed = busy;
  failed.comm_failed = true;
  CHECK(judge_wait(failed, 0.0, 10) == NcclWaitVerdict::failed);
  CHECK(judge_wait(failed, 100.0, 10) == NcclWaitVerdict::failed);  // an error is said as such, not as a stall
  NcclProbe cuda_failed = idle;
  cuda_failed.stream_failed = true;
  CHECK(judge_wait(cuda_failed, 0.0, 10) == NcclWaitVerdict::failed);
}

TEST_CASE("the nccl watchdog polls at once, then at most every millisecond") {
  CHECK(nccl::poll_pause_s(0) == 0);
  CHECK(nccl::poll_pause_s(50e-6) == 0);
  CHECK(nccl::poll_pause_s(1.6e-3) == doctest::Approx(1e-4));
  CHECK(nccl::poll_pause_s(5.0) == doctest::Approx(1e-3));
}

// A probe that says what `script` says, one entry per look, the last one for ever after.
struct ScriptedProbe {
  std::vector<NcclProbe> script;
  int looks = 0;
  NcclProbe operator()() {
    const size_t i = std::min(static_cast<size_t>(looks), script.size() - 1);
    ++looks;
    return script[i];
  }
};

TEST_CASE("every nccl wait polls again until NCCL says the call is over (poll_until_settled)") {
  NcclProbe in_progress;  // a finalize or an initialisation still running: nothing on a stream
  in_progress.stream_idle = true;
  in_progress.comm_in_progress = true;
  NcclProbe settled;
  settled.stream_idle = true;
  NcclProbe failed = in_progress;
  failed.comm_failed = true;

  SUBCASE("in progress three times, then settled: four looks, done") {
    // The finalize's own loop saw the first look's ncclInProgress for ever, ran into its 10 s and
    // aborted every communicator it ended.
    ScriptedProbe probe{{in_progress, in_progress, in_progress, settled}};
    CHECK(nccl::poll_until_settled(std::ref(probe), 10) == NcclWaitVerdict::done);
    CHECK(probe.looks == 4);
  }
  SUBCASE("an error on the second look ends the wait as failed") {
    ScriptedProbe probe{{in_progress, failed, settled}};
    CHECK(nccl::poll_until_settled(std::ref(probe), 10) == NcclWaitVerdict::failed);
    CHECK(probe.looks == 2);
  }
  SUBCASE("never over: timed out after its timeout, having looked more than once") {
    ScriptedProbe probe{{in_progress}};
    CHECK(nccl::poll_until_settled(std::ref(probe), 0.02) == NcclWaitVerdict::timed_out);
    CHECK(probe.looks > 1);
  }
  SUBCASE("a probe that throws (the watchdog's stall report) ends the wait with its error") {
    int looks = 0;
    auto probe = [&]() -> NcclProbe {
      if (++looks == 3) throw std::runtime_error("stalled");
      return in_progress;
    };
    CHECK_THROWS_WITH(nccl::poll_until_settled(probe, 5), "stalled");
    CHECK(looks == 3);
  }
}

TEST_CASE("--devices names the GPUs of the nccl ranks; each GPU once") {
  CHECK(parse_cuda_device_list("cuda:0,cuda:1", "--devices") == std::vector<int>{0, 1});
  CHECK(parse_cuda_device_list("cuda:2,3", "--devices") == std::vector<int>{2, 3});
  CHECK(parse_cuda_device_list("cuda:5", "--devices") == std::vector<int>{5});
  CHECK(contains(usage_error_of([] { parse_cuda_device_list("cuda:0,cuda:0", "--devices"); }), "cuda:0 is named twice"));
  CHECK(contains(usage_error_of([] { parse_cuda_device_list("cpu:2", "--devices"); }), "--devices 'cpu:2': not a list"));
  CHECK(contains(usage_error_of([] { parse_cuda_device_list("cuda:-1", "--devices"); }), "cuda:N with N >= 0"));
  CHECK(contains(usage_error_of([] { parse_cuda_device_list("cuda:0,", "--devices"); }), "cuda:N with N >= 0"));
  CHECK(contains(usage_error_of([] { parse_cuda_device_list("cuda:x", "--devices"); }), "cuda:N with N >= 0"));

  TrainOptions o;
  o.devices = "cuda:0,cuda:1,cuda:3";
  CHECK(o.ranks() == 3);
  CHECK(o.device() == Device::cuda(0));
  CHECK(o.cuda_devices() == std::vector<int>{0, 1, 3});
  // "cuda" alone is a launch's (each process on its node's GPU): no list; outside one, refused.
  o.devices = "cuda";
  CHECK(o.cuda_devices().empty());
  CHECK(contains(usage_error_of([&] { (void)o.ranks(); }), "--devices cuda names no GPU here"));
  o.process_ranks = 4;
  CHECK(o.ranks() == 4);
}

TEST_CASE("a process under a launcher drives its local rank's GPU (its own where it sees one alone), never two ranks on one") {
  CHECK(nccl_device_for_local_rank(0, 4) == 0);
  CHECK(nccl_device_for_local_rank(3, 4) == 3);
  // srun --gpus-per-task=1: each process sees its own GPU alone, as cuda:0.
  CHECK(nccl_device_for_local_rank(3, 1) == 0);
  // More processes than GPUs: two ranks land on one, which first_shared_gpu finds by UUID.
  CHECK(nccl_device_for_local_rank(4, 4) == 0);
  CHECK_THROWS_WITH_AS(nccl_device_for_local_rank(0, 0), doctest::Contains("sees none"), Error);
  CHECK(!first_shared_gpu({"a", "b", "c"}).has_value());
  CHECK(first_shared_gpu({"a", "b", "c", "b", "a"}) == std::make_pair(1, 3));
  CHECK(!first_shared_gpu({}).has_value());
}

TEST_CASE("dpx train --backend nccl: the options it needs, refused with what to do") {
  auto check = [](void (*change)(TrainOptions&)) {
    return dpx::testing::ddp_options_error("cuda:0,cuda:1", "nccl", change);
  };
  if (!kNcclBuilt) {
    const std::string e = check([](TrainOptions&) {});
    CHECK(contains(e, "--backend nccl: not built"));
    CHECK(contains(e, "-DDPX_CUDA=ON"));
    return;
  }
  CHECK(check([](TrainOptions&) {}).empty());
  CHECK(contains(check([](TrainOptions& o) { o.devices = "cpu:2"; }), "--backend nccl runs one rank per GPU"));
  CHECK(contains(check([](TrainOptions& o) { o.parallel = ParallelMode::dp; }), "pass --parallel ddp"));
  // Half-precision gradients and compute are the GPU's to take (narrowed on the compute stream).
  CHECK(check([](TrainOptions& o) { o.grad_dtype = DType::bf16; }).empty());
  CHECK(check([](TrainOptions& o) { o.grad_dtype = DType::f16; o.precision = Precision::fp16; }).empty());
  CHECK(check([](TrainOptions& o) { o.precision = Precision::bf16; }).empty());
  CHECK(contains(check([](TrainOptions& o) { o.algo = Algorithm::tree; }), "NCCL chooses its own algorithm"));
  CHECK(contains(check([](TrainOptions& o) { o.net_sim = "1GB,1us"; }), "drop --net-sim"));
  CHECK(contains(check([](TrainOptions& o) { o.backend.reset(); o.algo = Algorithm::ring; }),
                 "DDP over GPUs all-reduces with NCCL: add --backend nccl"));
  // --backend is parsed where the command line comes in: a name it does not know never reaches here.
  CHECK(contains(usage_error_of([] { parse_choice(kBackends, "gloo", "--backend", "backend"); }),
                 "--backend: unknown backend 'gloo'"));
  CHECK(contains(check([](TrainOptions& o) { o.backend.reset(); o.devices = "cpu:2"; }),
            "--algo nccl is NCCL's all-reduce: it needs --backend nccl"));
  CHECK(contains(check([](TrainOptions& o) { o.backend.reset(); o.parallel = ParallelMode::dp; o.devices = "cuda:0"; }),
            "DataParallel needs two GPUs or more"));
  // Under mpirun each process drives its local rank's GPU: --devices cuda.
  CHECK(check([](TrainOptions& o) { o.process_ranks = 2; o.devices = "cuda"; }).empty());
  CHECK(contains(check([](TrainOptions& o) { o.process_ranks = 2; }), "pass --devices cuda"));
  CHECK(contains(check([](TrainOptions& o) {
                   o.process_ranks = 2;
                   o.backend.reset();
                   o.algo = Algorithm::ring;
                   o.devices = "cuda:0";
                 }),
                 "pass --backend nccl --devices cuda"));
}

TEST_CASE("the nccl algorithm is NCCL's own, named where it is built") {
  CHECK(algorithm_name(Algorithm::nccl) == "nccl");
  CHECK(is_library_algorithm(Algorithm::nccl));
  CHECK(algorithm_applies(Algorithm::nccl, Collective::all_reduce));
  CHECK(algorithm_applies(Algorithm::nccl, Collective::scatter));
  if (kNcclBuilt) CHECK(parse_algorithm("nccl") == Algorithm::nccl);
  else CHECK(contains(usage_error_of([] { parse_algorithm("nccl"); }), "-DDPX_CUDA=ON"));
}

TEST_CASE("without a GPU, making nccl communicators is a usage error that says why") {
  if (cuda::available()) return;  // a GPU machine: tests/cuda/test_nccl.cpp runs them
  const std::string e = usage_error_of([] { make_nccl_communicators({0, 1}, 10); });
  CHECK(contains(e, "--backend nccl"));
  CHECK(contains(e, kNcclBuilt ? "no usable CUDA device" : "-DDPX_CUDA=ON"));
  // run_nccl_ranks makes them first: no rank's body runs.
  bool ran = false;
  const std::string r = usage_error_of([&] {
    run_nccl_ranks({0, 1}, 10, {}, [&](Communicator&, Communicator&) { ran = true; });
  });
  CHECK(contains(r, "--backend nccl"));
  CHECK_FALSE(ran);
}

#ifdef DPX_WITH_CUDA
TEST_CASE("dpx's dtypes and reductions are NCCL's") {
  CHECK(nccl::nccl_dtype(DType::f32) == ncclFloat32);
  CHECK(nccl::nccl_dtype(DType::f64) == ncclFloat64);
  CHECK(nccl::nccl_dtype(DType::f16) == ncclFloat16);
  CHECK(nccl::nccl_dtype(DType::bf16) == ncclBfloat16);
  CHECK(nccl::nccl_dtype(DType::i32) == ncclInt32);
  CHECK(nccl::nccl_dtype(DType::i64) == ncclInt64);
  CHECK(nccl::nccl_dtype(DType::u8) == ncclUint8);
  CHECK(nccl::nccl_op(ReduceOp::sum) == ncclSum);
  CHECK(nccl::nccl_op(ReduceOp::prod) == ncclProd);
  CHECK(nccl::nccl_op(ReduceOp::max) == ncclMax);
  CHECK(nccl::nccl_op(ReduceOp::min) == ncclMin);
  CHECK(nccl::nccl_op(ReduceOp::avg) == ncclAvg);
}
#endif
