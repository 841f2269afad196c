// Rank launch as a table: for each backend and launcher, how the ranks, their devices and their
// communicators are made (kLaunch, launch.cpp). dpx train (train/spmd.cpp) and dpx collective
// (bench/collective_bench.cpp) start their ranks here; each rank runs with a RankSetup: its
// device, a host communicator (votes, barriers, step records) and a data communicator (the
// gradients, the timed calls), each with messages of its own.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/device.hpp"
#include "parallel/comm/backend.hpp"
#include "parallel/comm/communicator.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "parallel/runtime/launch_info.hpp"

namespace dpx::parallel {

// What one rank runs with.
struct RankSetup {
  int rank = 0;
  Device device;                 // where its model and its buffers live
  Communicator* host = nullptr;  // host memory: votes, barriers, step records, checkpoints
  Communicator* data = nullptr;  // the data: DDP's gradients, dpx collective's timed calls
  double clock_offset_s = 0;     // its steady clock minus rank 0's (MPI processes on other nodes)
};

// What the ranks are to be.
struct LaunchSpec {
  Backend backend = Backend::threads;
  int ranks = 1;                       // thread ranks (under MPI: the processes)
  Device device;                       // the ranks' device on the host backends (threads, mpi)
  std::vector<int> gpus;               // thread ranks on GPUs (nccl, p2p): rank r's GPU
  RankOptions options;                 // timeout, pinning, --net-sim (the data's), hier's nodes
  Communicator* processes = nullptr;   // under an MPI launcher: the job's ranks, this process one
  const LaunchInfo* launch = nullptr;  // and how they were launched (local ranks, clock offsets)
};

using RankBody = std::function<void(RankSetup&)>;

// Runs `body` on every rank this process holds (each thread rank, or its one MPI rank) and
// returns when all have finished; errors as run_ranks (threads_backend.hpp). Throws
// dpx::UsageError for a backend the launcher cannot run.
void launch_ranks(const LaunchSpec& spec, const RankBody& body);

}  // namespace dpx::parallel
