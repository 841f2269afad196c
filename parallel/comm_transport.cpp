// Transport's shared part: byte counting and the default (dissemination) barrier.
#include "parallel/comm_transport.hpp"

namespace dpx::parallel {

void Transport::exchange(const Exchange& x) {
  do_exchange(x);
  if (x.send_peer >= 0) bytes_sent_.fetch_add(x.send_bytes, std::memory_order_relaxed);
  if (x.recv_peer >= 0) bytes_received_.fetch_add(x.recv_bytes, std::memory_order_relaxed);
}

void Transport::barrier() {
  // Round d: tell rank + d, hear from rank - d. After ceil(log2 n) rounds every rank has
  // (transitively) heard from every other, so none can leave before all have arrived.
  const int n = size(), r = rank();
  for (int d = 1; d < n; d *= 2) {
    Exchange x;
    x.send_peer = (r + d) % n;
    x.recv_peer = (r - d + n) % n;
    do_exchange(x);
  }
}

}  // namespace dpx::parallel
