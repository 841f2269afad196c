// GPU tests of the p2p backend (parallel/comm/p2p/p2p_backend.hpp): k ranks on the GPUs present (several
// on one GPU: the only multi-rank run a single-GPU machine allows) give, for every algorithm,
// dtype and op, bit for bit the threads backend's results on the same inputs; the device
// reduction kernels equal parallel/comm/transport.cpp's; dpx collective's p2p run checks with 0 wrong; and DDP
// training over p2p replicas on one GPU reproduces one GPU.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <sstream>
#include <vector>

#include "core/cuda/memory.hpp"
#include "parallel/bench/collective_bench.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "parallel/train/trainer.hpp"
#include "tests/common/compare.hpp"
#include "tests/parallel/small_job.hpp"

using namespace dpx;
using namespace dpx::parallel;

namespace {

// Rank r's input: a value per element that every dtype holds exactly or rounds alike in both
// backends (small integers and halves; near 1 for prod, so products neither vanish nor overflow).
std::vector<std::byte> input(int r, size_t count, DType dtype, ReduceOp op) {
  std::vector<std::byte> bytes(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    const double v = op == ReduceOp::prod ? 1.0 + 0.125 * static_cast<double>((i * 7 + r * 3) % 5)
                                          : static_cast<double>(static_cast<int>((i * 13 + r * 29) % 41) - 20) * 0.5;
    std::byte* p = bytes.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::f32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case DType::f64: std::memcpy(p, &v, 8); break;
      case DType::f16: { uint16_t h = float_to_half(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case DType::bf16: { uint16_t h = float_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case DType::i32: { int32_t x = static_cast<int32_t>(v * 2); std::memcpy(p, &x, 4); break; }
      case DType::i64: { int64_t x = static_cast<int64_t>(v * 2); std::memcpy(p, &x, 8); break; }
      case DType::u8: { uint8_t x = static_cast<uint8_t>(static_cast<int>(v * 2) & 0xFF); std::memcpy(p, &x, 1); break; }
    }
  }
  return bytes;
}

// Every rank's all_reduce result through the threads backend (host memory).
std::vector<std::vector<std::byte>> threads_all_reduce(int k, size_t count, DType dtype, ReduceOp op, Algorithm algo,
                                                       int ranks_per_node) {
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(k));
  RankOptions ro;
  ro.ranks_per_node = ranks_per_node;
  run_ranks(k, [&](Communicator& comm) {
    std::vector<std::byte> in = input(comm.rank(), count, dtype, op), res(in.size());
    comm.all_reduce(in.data(), res.data(), count, dtype, op, algo);
    out[static_cast<size_t>(comm.rank())] = res;
  }, ro);
  return out;
}

// The same through the p2p backend: inputs uploaded to each rank's GPU, results read back.
std::vector<std::vector<std::byte>> p2p_all_reduce(const std::vector<int>& devices, size_t count, DType dtype,
                                                   ReduceOp op, Algorithm algo, int ranks_per_node, bool in_place) {
  const int k = static_cast<int>(devices.size());
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(k));
  RankOptions ro;
  ro.ranks_per_node = ranks_per_node;
  run_p2p_ranks(devices, [&](Communicator&, Communicator& comm, int device) {
    const std::vector<std::byte> in = input(comm.rank(), count, dtype, op);
    const size_t bytes = in.size();
    void* d_in = cuda::allocate(bytes, device);
    void* d_out = in_place ? d_in : cuda::allocate(bytes, device);
    cuda::copy(d_in, Device::cuda(device), in.data(), Device::cpu(), bytes);
    comm.all_reduce(d_in, d_out, count, dtype, op, algo);
    std::vector<std::byte> res(bytes);
    cuda::copy(res.data(), Device::cpu(), d_out, Device::cuda(device), bytes);
    out[static_cast<size_t>(comm.rank())] = res;
    cuda::release(d_in, bytes, device);
    if (!in_place) cuda::release(d_out, bytes, device);
  }, ro);
  return out;
}

std::vector<int> gpus_for(int k) { return p2p_rank_devices(k, {}); }

}  // namespace

TEST_CASE("p2p all_reduce equals the threads backend's, bit for bit, for every algorithm, dtype and op") {
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8};
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min, ReduceOp::avg};
  for (int k : {2, 3, 4}) {
    const std::vector<int> devices = gpus_for(k);
    for (Algorithm algo : kAlgorithms) {  // dpx's own (the library's, mpi, is not in the list)
      const int ranks_per_node = algo == Algorithm::hier ? 2 : 0;
      for (DType dtype : dtypes)
        for (ReduceOp op : ops)
          for (size_t count : {size_t{1}, size_t{1000}, size_t{(1 << 16) + 3}}) {
            CAPTURE(k);
            CAPTURE(algorithm_name(algo));
            CAPTURE(dtype_name(dtype));
            CAPTURE(reduce_op_name(op));
            CAPTURE(count);
            const auto want = threads_all_reduce(k, count, dtype, op, algo, ranks_per_node);
            const bool in_place = count % 2 == 1;
            const auto got = p2p_all_reduce(devices, count, dtype, op, algo, ranks_per_node, in_place);
            for (int r = 0; r < k; ++r) CHECK(got[static_cast<size_t>(r)] == want[static_cast<size_t>(r)]);
          }
    }
  }
}

TEST_CASE("p2p: four ranks on GPU 0 alone run every collective of dpx collective with 0 wrong") {
  for (const char* coll : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "sendrecv",
                           "all_to_all", "gather", "scatter"}) {
    CAPTURE(coll);
    CollectiveOptions o;
    o.collective = coll;
    o.backend = "p2p";
    o.gpus.assign(1, '0');  // not = "0": GCC 12 warns -Wrestrict falsely there
    o.ranks = 4;
    o.algo = "all";
    o.min_bytes = 1 << 10;
    o.max_bytes = 1 << 20;
    o.step_factor = 32;
    o.iters = 2;
    o.warmup_iters = 1;
    std::ostringstream out;
    const CollectiveReport report = run_collective(o, out, nullptr);
    CHECK(report.failed == 0);
    CHECK(!report.rows.empty());
    CHECK(out.str().find("device cuda:0") != std::string::npos);
  }
}

TEST_CASE("p2p: a rank's buffers must be on its own GPU") {
  const std::vector<int> devices = gpus_for(2);
  CHECK_THROWS_WITH_AS(run_p2p_ranks(devices, [&](Communicator&, Communicator& comm, int) {
                         Tensor host = Tensor::zeros({4}, DType::f32, Device::cpu());
                         comm.all_reduce(host, ReduceOp::sum);
                       }),
                       doctest::Contains("the p2p backend cannot reach tensors on cpu"), Error);
}

// dpx train --backend p2p: k replicas on GPU 0 (and on every GPU present, in turn) train the MLP as
// one GPU does on the same global batch, as DDP over thread ranks does on the CPU: losses and
// weights within 1e-4 (cuBLAS sums the half batches in another order), for one bucket and for one
// per tensor, with the all-reduces timed.
TEST_CASE("DDP over p2p replicas sharing a GPU reproduces one GPU on the same global batch") {
  std::ostringstream log;
  const TrainReport single = train(dpx::testing::small_job("cuda:0", ParallelMode::none), log);
  std::string all_gpus;
  for (int g = 0; g < cuda::device_count(); ++g) all_gpus += (g ? ",cuda:" : "cuda:") + std::to_string(g);
  for (const std::string& devices : {std::string("cuda:0,cuda:0"), std::string("cuda:0,cuda:0,cuda:0,cuda:0"), all_gpus}) {
    for (double bucket_mb : {25.0, 0.001}) {
      CAPTURE(devices);
      CAPTURE(bucket_mb);
      TrainOptions o = dpx::testing::small_job(devices, ParallelMode::ddp);
      o.backend = Backend::p2p;
      o.bucket_mb = bucket_mb;
      const TrainReport ddp = train(o, log);
      for (const auto& s : ddp.steps)
        if (o.ranks() > 1) CHECK(s.times[Phase::comm_total] > 0);
      dpx::testing::check_matches_one_replica(ddp, single);
    }
  }
}
