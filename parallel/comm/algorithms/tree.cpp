// Tree schedules: binomial trees (log2 n rounds; the latency-optimal choice for small messages),
// and their cost terms.
#include <algorithm>

#include "core/error.hpp"
#include "parallel/comm/algorithms/schedule.hpp"

namespace dpx::parallel::impl {

namespace {

// ---- binomial trees, over ranks relative to the root: v = (r - root) mod n --------------------

// Reduces every rank's `send` into the root's acc. Rank v adds the subtrees of v+1, v+2, v+4, ...
// (in that order, so the combination order is fixed) and passes its sum to v - lowbit(v).
void binomial_reduce(const Sched& s, const void* send, std::byte* acc, size_t count, int root) {
  const int v = mod(s.rank - root, s.ranks);
  const void* held = send;  // this rank's own data, then its running sum in acc
  for (int mask = 1; mask < s.ranks; mask <<= 1) {
    if (v & mask) {
      s.send(mod(v - mask + root, s.ranks), held, count);
      return;
    }
    if (v + mask < s.ranks) {
      s.recv_reduce(mod(v + mask + root, s.ranks), acc, held, count);
      held = acc;
    }
  }
}

// Sends the root's root_src to every rank's buf: v receives from v - lowbit(v), then forwards
// to v + lowbit(v)/2, ..., v + 1 (the farthest subtree first, so it starts forwarding soonest).
void binomial_broadcast(const Sched& s, const void* root_src, std::byte* buf, size_t count, int root) {
  const int v = mod(s.rank - root, s.ranks);
  int mask = 1;
  for (; mask < s.ranks; mask <<= 1) {
    if (v & mask) {
      s.recv(mod(v - mask + root, s.ranks), buf, count);
      break;
    }
  }
  const void* held = v == 0 ? root_src : buf;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < s.ranks) s.send(mod(v + mask + root, s.ranks), held, count);
}

// Gathers every rank's block at the root: the mirror image of binomial_reduce, with ranges of
// relative ranks [v, v + 2^k) concatenated instead of summed. `held` holds this rank's subtree.
void binomial_gather(const Sched& s, int root, const RelativeBlocks& held) {
  const int v = mod(s.rank - root, s.ranks);
  for (int mask = 1; mask < s.ranks; mask <<= 1) {
    if (v & mask) {
      held.send(mod(v - mask + root, s.ranks), v, std::min(v + mask, s.ranks));
      return;
    }
    if (v + mask < s.ranks) held.recv(mod(v + mask + root, s.ranks), v + mask, std::min(v + 2 * mask, s.ranks));
  }
}

// Scatters the root's blocks: the mirror image of binomial_gather (the farthest subtree first).
void binomial_scatter(const Sched& s, int root, const RelativeBlocks& held) {
  const int v = mod(s.rank - root, s.ranks);
  int mask = 1;
  for (; mask < s.ranks; mask <<= 1) {
    if (v & mask) {
      held.recv(mod(v - mask + root, s.ranks), v, std::min(v + mask, s.ranks));
      break;
    }
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < s.ranks) held.send(mod(v + mask + root, s.ranks), v + mask, std::min(v + 2 * mask, s.ranks));
}

// The relative ranks [v, end) whose blocks rank v of a binomial tree gathers or scatters: its
// subtree, all ranks for the root.
int subtree_end(int v, int n) { return v == 0 ? n : std::min(v + (v & -v), n); }

void tree_all_reduce(const Sched& s) {
  std::byte* recv = static_cast<std::byte*>(s.args.recv);
  binomial_reduce(s, s.args.send, recv, s.args.count, 0);
  if (s.rank == 0) s.finish_avg(recv, s.args.count);
  binomial_broadcast(s, recv, recv, s.args.count, 0);
}

void tree_reduce(const Sched& s) {
  const CollectiveArgs& a = s.args;
  std::byte* acc = s.rank == a.root ? static_cast<std::byte*>(a.recv) : s.scratch(a.count);
  binomial_reduce(s, a.send, acc, a.count, a.root);
  if (s.rank == a.root) s.finish_avg(acc, a.count);
}

void tree_broadcast(const Sched& s) {
  const CollectiveArgs& a = s.args;
  if (s.rank == a.root) s.copy(a.recv, a.send, a.count);
  binomial_broadcast(s, a.send, static_cast<std::byte*>(a.recv), a.count, a.root);
}

void tree_all_gather(const Sched& s) {
  const CollectiveArgs& a = s.args;
  std::byte* recv = static_cast<std::byte*>(a.recv);
  s.copy(s.at(recv, s.rank * a.count), a.send, a.count);
  binomial_gather(s, 0, {.s = s, .buf = recv, .count = a.count, .whole = true});
  binomial_broadcast(s, recv, recv, a.count * s.ranks, 0);
}

void tree_reduce_scatter(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const size_t total = a.count * s.ranks;
  std::byte* acc = s.scratch(total);
  binomial_reduce(s, a.send, acc, total, 0);
  binomial_scatter(s, 0, {.s = s, .buf = acc, .count = a.count, .whole = true});
  s.copy(a.recv, s.at(acc, s.rank * a.count), a.count);
  s.finish_avg(a.recv, a.count);
}

// Gather: a leaf sends its own block straight from send; an inner rank collects its subtree
// in scratch (its own block first); the root collects into recv, at every rank's place.
void tree_gather(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const int v = mod(s.rank - a.root, s.ranks), end = subtree_end(v, s.ranks);
  const RelativeBlocks held = held_blocks(s, v == 0, v, end, static_cast<std::byte*>(a.recv),
                                          static_cast<std::byte*>(const_cast<void*>(a.send)));
  s.copy(held.at(v), a.send, a.count);
  binomial_gather(s, a.root, held);
}

// Scatter: the mirror image; a leaf receives straight into recv, an inner rank its subtree into
// scratch, and each keeps its own block.
void tree_scatter(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const int v = mod(s.rank - a.root, s.ranks), end = subtree_end(v, s.ranks);
  const RelativeBlocks held = held_blocks(s, v == 0, v, end, static_cast<std::byte*>(const_cast<void*>(a.send)),
                                          static_cast<std::byte*>(a.recv));
  binomial_scatter(s, a.root, held);
  s.copy(a.recv, held.at(v), a.count);
}

// ---- the cost terms of the schedules above (cost.hpp) -------------------------------------------

CostTerms all_reduce_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(2 * v.L, 2 * v.L * v.n, v.L * v.n);
}

CostTerms broadcast_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(v.L, v.L * v.n);
}

CostTerms reduce_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(v.L, v.L * v.n, v.L * v.n);
}

CostTerms all_gather_cost(const CallShape& s) {  // gather to rank 0, then broadcast
  const CostVars v(s);
  return CostTerms{}.step(2 * v.L, v.ring + v.L * v.n);
}

CostTerms reduce_scatter_cost(const CallShape& s) {  // reduce to rank 0, then scatter
  const CostVars v(s);
  return CostTerms{}.step(2 * v.L, v.L * v.n + v.ring, v.L * v.n);
}

CostTerms gather_cost(const CallShape& s) {  // gather and scatter
  const CostVars v(s);
  return CostTerms{}.step(v.L, v.ring);
}

}  // namespace

constinit const Schedules tree_schedules = {
    .all_reduce = {tree_all_reduce, all_reduce_cost, "2L a + 2L n b + L n g"},
    .broadcast = {tree_broadcast, broadcast_cost, "L a + L n b"},
    .reduce = {tree_reduce, reduce_cost, "L a + L n b + L n g"},
    .all_gather = {tree_all_gather, all_gather_cost, "2L a + ((p-1)/p + L) n b"},
    .reduce_scatter = {tree_reduce_scatter, reduce_scatter_cost, "2L a + (L + (p-1)/p) n b + L n g"},
    .gather = {tree_gather, gather_cost, "L a + (p-1)/p n b"},
    .scatter = {tree_scatter, gather_cost, "L a + (p-1)/p n b"},
};

}  // namespace dpx::parallel::impl
