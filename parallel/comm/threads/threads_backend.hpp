// The `threads` backend: k ranks as threads of one process sharing memory, run as one OpenMP
// parallel region with one OpenMP thread per rank (docs/ARCHITECTURE.md, "Parallel model").
// Point-to-point steps hand a pointer to the peer, which copies or reduces straight out of the
// sender's buffer.
#pragma once
#include <functional>

#include "parallel/comm/communicator.hpp"

namespace dpx::parallel {

struct RankOptions {
  // Pin rank r to the (r mod n)-th CPU this process may run on (restored when run_ranks returns).
  bool pin_threads = false;
  // A rank that waits longer than this in one exchange of a collective gives up with a stall
  // report (stall_report.hpp); barrier_patient waits are exempt. --comm-timeout.
  double timeout_s = 300;
  // For hier: groups of this many consecutive ranks are taken as one node (0: one node).
  int ranks_per_node = 0;
  // Every exchange as on this network (--net-sim); off by default.
  NetSim net_sim;
};

// Runs fn(comm) on k ranks at once and returns when all have finished. If a rank throws, every
// rank blocked in (or later entering) a communication call throws "rank R aborted: <reason>",
// and run_ranks rethrows the first exception once all ranks have stopped. A rank that returns
// while another still waits for it (the ranks called different collectives) is an error too,
// and so are ranks that all wait for each other (a deadlock) and a wait longer than
// options.timeout_s (a stall report), which the process's watchdog sees (runtime/watchdog.hpp):
// every rank then throws its report, never a hang. More ranks than CPUs is allowed (they wait on
// condition variables, not by spinning); saying so to the user is the CLI's job.
void run_ranks(int k, const std::function<void(Communicator&)>& fn, const RankOptions& options = {});

// CPUs this process may run on (its affinity mask), at least 1.
int available_cpus();

}  // namespace dpx::parallel
