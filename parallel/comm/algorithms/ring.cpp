// Ring schedules: every rank sends only to its right neighbour and receives only from its
// left, so each link carries (n-1)/n of the data per phase — the bandwidth-optimal algorithm
// NCCL uses for large messages. Block c is reduced in ring order starting at rank c+1. The ring
// also names the one-step exchanges of sendrecv and all_to_all (pairwise, one peer pair a step).
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "parallel/comm/algorithms/schedule.hpp"

namespace dpx::parallel::impl {

namespace {

// Pipelined broadcast: chunks of about this size travel down the chain one step apart.
constexpr size_t kPipelineChunkBytes = size_t{1} << 20;
constexpr size_t kMaxPipelineChunks = 64;

// Reduce-scatter of `send` (split into blocks b) around the ring. At step k this rank sends the
// partial sum of block r-k-1 right and combines block r-k-2 from the left with its own data,
// writing it to partial(block, k). After n-1 steps partial(r, n-2) holds block r fully reduced.
template <typename Where>
void ring_reduce_scatter(const Sched& s, const void* send, const Blocks& b, Where partial) {
  const int right = mod(s.rank + 1, s.ranks), left = mod(s.rank - 1, s.ranks);
  const void* carried = nullptr;  // the partial sum received in the previous step
  for (int k = 0; k < s.ranks - 1; ++k) {
    const int out = mod(s.rank - k - 1, s.ranks), in = mod(s.rank - k - 2, s.ranks);
    const void* src = k == 0 ? s.at(send, b.begin(out)) : carried;
    std::byte* dst = partial(in, k);
    s.sendrecv_reduce(right, src, b.size(out), left, dst, s.at(send, b.begin(in)), b.size(in));
    carried = dst;
  }
}

// All-gather around the ring: this rank starts with block r of buf; each step passes on the
// block received in the step before, so after n-1 steps every block is everywhere.
void ring_all_gather(const Sched& s, std::byte* buf, const Blocks& b) {
  const int right = mod(s.rank + 1, s.ranks), left = mod(s.rank - 1, s.ranks);
  for (int k = 0; k < s.ranks - 1; ++k) {
    const int out = mod(s.rank - k, s.ranks), in = mod(s.rank - k - 1, s.ranks);
    s.sendrecv(right, s.at(buf, b.begin(out)), b.size(out), left, s.at(buf, b.begin(in)), b.size(in));
  }
}

void all_reduce(const Sched& s) {
  const CollectiveArgs& a = s.args;
  std::byte* recv = static_cast<std::byte*>(a.recv);
  Blocks b = even_blocks(a.count, s.ranks);
  ring_reduce_scatter(s, a.send, b, [&](int block, int) { return s.at(recv, b.begin(block)); });
  s.finish_avg(s.at(recv, b.begin(s.rank)), b.size(s.rank));
  ring_all_gather(s, recv, b);
}

void reduce_scatter(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const size_t c = a.count;
  // Partial sums alternate between two scratch blocks; the last one lands in recv.
  std::byte* tmp = s.scratch(2 * c);
  ring_reduce_scatter(s, a.send, even_blocks(c * s.ranks, s.ranks), [&](int, int k) {
    return k == s.ranks - 2 ? static_cast<std::byte*>(a.recv) : s.at(tmp, (k % 2) * c);
  });
  s.finish_avg(a.recv, c);
}

void all_gather(const Sched& s) {
  const CollectiveArgs& a = s.args;
  std::byte* recv = static_cast<std::byte*>(a.recv);
  s.copy(s.at(recv, s.rank * a.count), a.send, a.count);
  ring_all_gather(s, recv, even_blocks(a.count * s.ranks, s.ranks));
}

// Reduce = ring reduce-scatter, then every rank sends its reduced block to the root.
void reduce(const Sched& s) {
  const CollectiveArgs& a = s.args;
  Blocks b = even_blocks(a.count, s.ranks);
  const size_t largest = b.size(0);
  std::byte* tmp = s.scratch(2 * largest);
  auto partial = [&](int block, int k) {
    if (k == s.ranks - 2 && s.rank == a.root) return s.at(a.recv, b.begin(block));
    return s.at(tmp, (k % 2) * largest);
  };
  ring_reduce_scatter(s, a.send, b, partial);
  std::byte* mine = partial(s.rank, s.ranks - 2);
  s.finish_avg(mine, b.size(s.rank));
  if (s.rank == a.root) {
    for (int q = 0; q < s.ranks; ++q)
      if (q != a.root) s.recv(q, s.at(a.recv, b.begin(q)), b.size(q));
  } else {
    s.send(a.root, mine, b.size(s.rank));
  }
}

// Broadcast down the chain root -> root+1 -> ... in pipelined chunks: the rank at distance d
// from the root receives chunk c at step c+d-1 and forwards it at step c+d.
void broadcast(const Sched& s) {
  const CollectiveArgs& a = s.args;
  std::byte* recv = static_cast<std::byte*>(a.recv);
  const int d = mod(s.rank - a.root, s.ranks), next = mod(s.rank + 1, s.ranks), prev = mod(s.rank - 1, s.ranks);
  if (d == 0) s.copy(recv, a.send, a.count);
  const void* src = d == 0 ? a.send : recv;
  const size_t bytes = a.count * s.elem_size;
  const size_t chunks = std::min({a.count, kMaxPipelineChunks, std::max<size_t>(1, bytes / kPipelineChunkBytes)});
  Blocks b = even_blocks(a.count, static_cast<int>(chunks));
  const int nchunks = static_cast<int>(chunks);
  for (int k = 0; k < nchunks + s.ranks - 2; ++k) {
    const int out = k - d, in = k - d + 1;
    const bool sends = d <= s.ranks - 2 && out >= 0 && out < nchunks;
    const bool receives = d >= 1 && in >= 0 && in < nchunks;
    if (!sends && !receives) continue;
    s.sendrecv(sends ? next : -1, sends ? s.at(src, b.begin(out)) : nullptr, sends ? b.size(out) : 0,
               receives ? prev : -1, receives ? s.at(recv, b.begin(in)) : nullptr, receives ? b.size(in) : 0);
  }
}

// In place (send == recv) the input is first copied aside: a peer may still be reading a block
// of it when this rank's receive overwrites it. The result is then MPI's in-place one
// (MPI_Sendrecv_replace, MPI_Alltoall with MPI_IN_PLACE).
const void* staged_input(const Sched& s, size_t elems) {
  if (s.args.send != s.args.recv) return s.args.send;
  std::byte* tmp = s.scratch(elems);
  s.copy(tmp, s.args.send, elems);
  return tmp;
}

// One step of the ring: send right, receive from the left (nccl-tests' sendrecv).
void sendrecv(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const void* src = staged_input(s, a.count);
  s.sendrecv(mod(s.rank + 1, s.ranks), src, a.count, mod(s.rank - 1, s.ranks), a.recv, a.count);
}

// Pairwise exchange: at step k = 1..n-1 this rank sends block r+k to rank r+k and receives
// block r-k from rank r-k, so every step every rank sends one block and receives one.
void all_to_all(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const size_t c = a.count;
  const bool in_place = a.send == a.recv;
  const void* src = staged_input(s, c * s.ranks);
  if (!in_place) s.copy(s.at(a.recv, s.rank * c), s.at(src, s.rank * c), c);
  for (int k = 1; k < s.ranks; ++k) {
    const int to = mod(s.rank + k, s.ranks), from = mod(s.rank - k, s.ranks);
    s.sendrecv(to, s.at(src, to * c), c, from, s.at(a.recv, from * c), c);
  }
}

// ---- the cost terms of the schedules above (cost.hpp) -------------------------------------------

CostTerms all_reduce_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(2 * (v.P - 1), 2 * v.ring, v.ring);
}

// A chain of C chunks (as broadcast() cuts them): p - 2 + C steps of n / C.
CostTerms broadcast_cost(const CallShape& s) {
  const CostVars v(s);
  const double count = s.count > 0 ? s.count : s.bytes / 4;
  const double c = std::max(1.0, std::min({count, static_cast<double>(kMaxPipelineChunks),
                                           std::max(1.0, std::floor(s.bytes / kPipelineChunkBytes))}));
  return CostTerms{}.step(v.P - 2 + c, (v.P - 2 + c) * v.n / c);
}

CostTerms reduce_scatter_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(v.P - 1, v.ring, v.ring);
}

// all_gather, and all_to_all's pairwise exchange: p - 1 steps of one block.
CostTerms all_gather_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(v.P - 1, v.ring);
}

CostTerms sendrecv_cost(const CallShape& s) { return CostTerms{}.step(1, s.bytes); }  // both neighbours at once

}  // namespace

constinit const Schedules ring_schedules = {
    .all_reduce = {all_reduce, all_reduce_cost, "2(p-1) a + 2(p-1)/p n b + (p-1)/p n g"},
    .broadcast = {broadcast, broadcast_cost, "(p-2+C) a + (p-2+C)/C n b"},
    .reduce = {reduce, all_reduce_cost, "2(p-1) a + 2(p-1)/p n b + (p-1)/p n g"},  // reduce-scatter + gather
    .all_gather = {all_gather, all_gather_cost, "(p-1) a + (p-1)/p n b"},
    .reduce_scatter = {reduce_scatter, reduce_scatter_cost, "(p-1) a + (p-1)/p n b + (p-1)/p n g"},
    .sendrecv = {sendrecv, sendrecv_cost, "a + n b"},
    .all_to_all = {all_to_all, all_gather_cost, "(p-1) a + (p-1)/p n b"},
};

}  // namespace dpx::parallel::impl
