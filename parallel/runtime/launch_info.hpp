// How a job was launched: thread ranks in one process, or MPI processes on nodes. The start-up
// table and config.json show it; the trainer uses the clock offsets and the cores per rank.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace dpx::parallel {

// How the job was launched, for the start-up table and config.json.
struct LaunchInfo {
  std::string backend = "threads";   // "mpi" when the ranks are processes
  std::string library;               // "Open MPI v4.1.4, MPI 3.1"
  std::string thread_level;          // "MPI_THREAD_MULTIPLE"
  std::string launcher;              // launcher_env.hpp
  int ranks = 1, nodes = 1;
  std::vector<std::string> hosts;    // per rank
  std::vector<int> pids, node_of_rank, local_rank;
  std::vector<double> clock_offset_s, clock_uncertainty_s;  // per rank: its steady clock minus rank 0's
  std::vector<std::pair<std::string, std::string>> launcher_env;
  // CPUs for one rank's kernels: the launcher's binding, or an equal share of the node's CPUs
  // when the launcher did not bind (the default of --threads under MPI).
  int cores_per_rank = 1;
  bool bound = false;  // the launcher bound this process to fewer CPUs than the machine has
};

}  // namespace dpx::parallel
