// Transport's shared part: byte counting, the default (dissemination) barrier, the node layout.
#include "parallel/comm/transport.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.hpp"

namespace dpx::parallel {

void Transport::exchange(const Exchange& x) {
  do_exchange(x);
  // Both halves run at once (full duplex): a step costs as much as its larger half.
  const size_t bytes = std::max(x.send_peer >= 0 ? x.send_bytes : 0, x.recv_peer >= 0 ? x.recv_bytes : 0);
  if (net_sim_.enabled()) {
    // The exchange has completed, so both ranks are here (a late peer already cost its delay);
    // what the network adds is the message's own time.
    const auto wait = std::chrono::duration<double>(net_sim_.message_s(bytes));
    std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::nanoseconds>(wait));
  }
  if (x.send_peer >= 0) bytes_sent_.fetch_add(x.send_bytes, std::memory_order_relaxed);
  if (x.recv_peer >= 0) bytes_received_.fetch_add(x.recv_bytes, std::memory_order_relaxed);
  exchanges_.fetch_add(1, std::memory_order_relaxed);
  step_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (x.recv_peer >= 0 && x.reduce_with) reduced_bytes_.fetch_add(x.recv_bytes, std::memory_order_relaxed);
}

void Transport::copy_local(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

void Transport::average_local(void* data, size_t count, DType dtype, int ranks) {
  finish_average(data, count, dtype, ranks);
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

int Transport::node_of(int rank) const {
  return node_of_rank_.empty() ? 0 : node_of_rank_[static_cast<size_t>(rank)];
}

void Transport::set_node_layout(std::vector<int> node_of_rank) {
  if (!node_of_rank.empty() && node_of_rank.size() != static_cast<size_t>(size()))
    fail("a node layout of ", node_of_rank.size(), " entries for a group of ", size(), " ranks");
  node_of_rank_ = std::move(node_of_rank);
}

}  // namespace dpx::parallel
