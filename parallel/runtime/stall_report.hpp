// Stall reports, after Horovod's stall inspector: when a rank has waited longer than
// --comm-timeout in one collective, it says which collective (its number on the communicator,
// its size), which ranks have reached it, and what every other rank was doing instead. The
// threads backend reads the other ranks' state from memory; the mpi backend asks them.
#pragma once
#include <string>
#include <vector>

#include "parallel/comm/algorithms/algorithms.hpp"

namespace dpx::parallel {

// What one rank was doing when the report was made.
struct RankStatus {
  enum class State : uint8_t {
    busy,       // between calls: computing, loading, writing ("outside communication")
    in_call,    // inside `call` of the communicator `comm`
    finished,   // done with its work (returned from its rank function)
    no_answer,  // asked, did not answer in time: hung, stopped, or unreachable
    gone,       // its process no longer exists
  };
  int rank = 0;
  State state = State::busy;
  CommCall call;          // state == in_call
  std::string comm;       // the communicator of `call` ("world", "ranks 0-3")
  double for_s = 0;       // how long it has been in this state (busy: since its last call ended)
  std::string activity;   // what it last said it does ("training: epoch 1 step 12")
  int pid = 0;            // 0 for thread ranks
  std::string host;
};

// The rank that gives up: where it waits, and for how long.
struct StallPoint {
  int rank = 0;
  CommCall call;
  std::string comm;
  double waited_s = 0, timeout_s = 0;
  int waiting_for = -1;  // the peer an exchange waits on, when known
};

// "all_reduce #57 (25.0 MiB of f32, ring)", "recv from rank 3 (4 B)", "barrier #12".
std::string describe_call(const CommCall& call);
// The report: a headline, the ranks that reached the call, and every other rank's state, then
// what to look at. `ranks` holds one entry per rank of the communicator, in rank order.
std::string stall_report(const StallPoint& at, const std::vector<RankStatus>& ranks);
// "rank 3 (pid 42 on node-b): busy outside communication for 2.0 s [last said: ...]"
std::string describe_status(const RankStatus& status);
// "0, 2-4, 7"
std::string rank_list(const std::vector<int>& ranks);

}  // namespace dpx::parallel
