// The nccl backend's entry points (parallel/comm/nccl/): communicators whose collectives are NCCL's, on
// a communication stream of each rank's GPU. Free of CUDA headers, so the trainer and `dpx
// collective`, compiled in every build, call them; in a build without CUDA (nccl_none.cpp) each
// throws a UsageError that names -DDPX_CUDA=ON.
//
// Buffers passed to these communicators are device memory of the rank's GPU. Calls are queued on
// the communicator's stream and return at once (NCCL's semantics, not the host backends'):
// Communicator::synchronize() waits for them, polling the stream and ncclCommGetAsyncError, and
// past --comm-timeout prints the stall report and calls ncclCommAbort. Barriers wait.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/context.hpp"
#include "parallel/comm/communicator.hpp"
#include "parallel/comm/threads/threads_backend.hpp"

namespace dpx::parallel {

// One process drives every GPU of `devices`: rank i on cuda:devices[i], all communicators made
// together (non-blocking ncclCommInitRankConfig for each device inside one NCCL group: what
// ncclCommInitAll does, with a config). Each rank's thread then uses its own.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<int>& devices, double timeout_s);

// One rank per process (mpirun/srun): rank 0 of `world` (the MPI group, host memory) makes NCCL's
// unique id and broadcasts it; every process joins with its GPU `device`. Collective over world.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& world, int device, double timeout_s);

// One process, one thread rank per GPU of `devices` (rank i on cuda:devices[i]): runs
// `body(host, nccl)` on each, `host` the thread ranks' communicator (host memory: votes, barriers)
// and `nccl` the rank's NCCL communicator (make_nccl_communicators). A rank that throws first
// aborts the group's NCCL communicators, so the other GPUs' threads stop instead of waiting for it
// in NCCL; each rank finalizes its own communicator when its body returns (a collective).
void run_nccl_ranks(const std::vector<int>& devices, double timeout_s, const RankOptions& options,
                    const std::function<void(Communicator& host, Communicator& nccl)>& body);

// Ends the waits of every rank of `comm`'s group in this process (their communicators are
// aborted): a rank thread that failed outside communication calls it, so the other GPUs' threads
// stop at once instead of waiting out --comm-timeout. No-op for other backends.
void abort_nccl_group(Communicator& comm, const std::string& why);

// Throws dpx::UsageError naming --backend nccl unless this process sees a usable GPU and, for
// count > 0, at least `count` of them: checked before anything is printed or started.
void check_nccl_gpus(int count);

// NCCL's version as "2.21.5", or why there is none.
std::string nccl_version();

// The GPU of a process that is local rank `local_rank` on its node and sees `visible` GPUs: the
// local rank's where every process sees the node's GPUs (mpirun; as torchrun's LOCAL_RANK), its
// first where each sees only its own (srun --gpus-per-task=1 or --gpu-bind: each process's
// CUDA_VISIBLE_DEVICES holds its GPU, as cuda:0): local_rank modulo visible covers both. Two
// ranks that end up on one GPU (more processes than GPUs) are refused when the communicator is
// made, by the GPUs' UUIDs (first_shared_gpu).
int nccl_device_for_local_rank(int local_rank, int visible);

// The first two ranks (in rank order) whose GPUs are one, from each rank's GPU UUID; nullopt when
// every rank has a GPU of its own.
std::optional<std::pair<int, int>> first_shared_gpu(const std::vector<std::string>& uuids);

// The GPUs of --devices "cuda:0,cuda:1" or "cuda:0,1" (a single "cuda:N" is one GPU); throws
// dpx::UsageError naming `flag` for anything else, a repeated GPU or a negative index.
// With `repeats` a GPU may be named more than once (--backend p2p: several replicas on one GPU).
std::vector<int> parse_cuda_device_list(std::string_view devices, std::string_view flag, bool repeats = false);

}  // namespace dpx::parallel
