// The `p2p` backend: dpx's own collective algorithms (ring, tree, naive, rhd, hier) over CUDA
// device-to-device copies and a device reduction kernel, so that they can be compared with
// NCCL's on the same GPUs, and so that several ranks can share one GPU (NCCL refuses two ranks
// on one device): the one way to run k > 1 ranks on a single-GPU machine. Ranks are threads of
// this process, as in the threads backend (thread_ranks.hpp); rank r's buffers live on its GPU.
// This header needs no CUDA headers; without CUDA, run_p2p_ranks throws a UsageError.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/context.hpp"
#include "parallel/comm/communicator.hpp"
#include "parallel/comm/threads/threads_backend.hpp"

namespace dpx::parallel {

// The GPU of each of k ranks: rank r on gpus[r mod gpus.size()] (several ranks may share one).
// Empty `gpus`: every visible GPU. Throws a UsageError naming `flag` for a GPU that is not there.
std::vector<int> p2p_rank_devices(int k, const std::vector<int>& gpus, std::string_view flag = "--gpus");
// "0,1,3" -> {0, 1, 3}; "" -> {}; throws a UsageError naming `flag`.
std::vector<int> parse_gpu_list(std::string_view text, std::string_view flag = "--gpus");

// Runs fn(host, p2p, device) on devices.size() ranks, rank r on GPU devices[r] (its thread's
// current device), and returns when all have finished; errors, stalls and deadlocks as run_ranks
// (threads_backend.hpp). `p2p` moves the GPU buffers; `host`, the threads backend's communicator
// of the same ranks, host memory (votes, barriers, step records). Peer access is enabled between
// the GPUs that support it; between others the bytes go through the host.
// A rank's collectives run on a blocking stream of its own: work on the legacy default stream
// (cuda::copy, cuda::memset_zero) is ordered before them; work the caller queued on any other
// stream must be finished, or ordered by an event, before a call. Every collective is blocking:
// when it returns its results are on the device and its buffers may be reused.
void run_p2p_ranks(const std::vector<int>& devices,
                   const std::function<void(Communicator& host, Communicator& p2p, int device)>& fn,
                   const RankOptions& options = {});

// For the life of the returned scope, this thread's tensors on ctx's GPU come from the pool of
// ctx's compute stream (cuda::AllocationStreamScope): replicas that share a GPU never reuse each
// other's freed blocks early. Null on the CPU.
std::unique_ptr<cuda::AllocationStreamScope> replica_allocation_scope(const Context& ctx);

// Why `--backend p2p` cannot run here ("" when it can): not built with CUDA, or no GPU usable.
std::string p2p_unavailable_reason();

}  // namespace dpx::parallel
