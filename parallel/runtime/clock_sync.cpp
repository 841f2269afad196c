// Clock alignment (see clock_sync.hpp): rank 0 ping-pongs with each rank in turn.
#include "parallel/runtime/clock_sync.hpp"

#include <limits>

#include "core/clock.hpp"

namespace dpx::parallel {

std::vector<ClockOffset> align_clocks(Communicator& comm, int rounds) {
  const int n = comm.size(), r = comm.rank();
  std::vector<double> table(2 * static_cast<size_t>(n), 0.0);  // offset, uncertainty per rank
  for (int q = 1; q < n; ++q) {
    if (r == 0) {
      double best_rtt = std::numeric_limits<double>::infinity();
      for (int i = 0; i < rounds; ++i) {
        double sent = now_s(), theirs = 0;
        comm.send(&sent, 1, DType::f64, q);
        comm.recv(&theirs, 1, DType::f64, q);
        const double back = now_s(), rtt = back - sent;
        if (rtt < best_rtt) {  // their clock read between our two readings: at their midpoint, +- rtt / 2
          best_rtt = rtt;
          table[2 * static_cast<size_t>(q)] = theirs - (sent + back) / 2;
          table[2 * static_cast<size_t>(q) + 1] = rtt / 2;
        }
      }
    } else if (r == q) {
      for (int i = 0; i < rounds; ++i) {
        double ours = 0;
        comm.recv(&ours, 1, DType::f64, 0);
        ours = now_s();
        comm.send(&ours, 1, DType::f64, 0);
      }
    }
  }
  comm.broadcast(table.data(), table.data(), table.size(), DType::f64, 0);
  std::vector<ClockOffset> out(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) out[static_cast<size_t>(q)] = {table[2 * static_cast<size_t>(q)], table[2 * static_cast<size_t>(q) + 1]};
  return out;
}

}  // namespace dpx::parallel
