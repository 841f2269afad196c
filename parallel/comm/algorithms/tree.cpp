// Tree and naive schedules. tree: binomial trees (log2 n rounds; the latency-optimal choice for
// small messages). naive: every rank talks to the root only, which reduces in rank order and
// sends the result to each rank in turn — the baseline the others are measured against.
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
  RelativeBlocks held{.s = s, .buf = nullptr, .count = a.count, .root = a.root, .base = v};
  if (v == 0) {
    held.buf = static_cast<std::byte*>(a.recv);
    held.whole = true;
  } else {
    held.buf = end - v == 1 ? static_cast<std::byte*>(const_cast<void*>(a.send)) : s.scratch((end - v) * a.count);
  }
  s.copy(held.at(v), a.send, a.count);
  binomial_gather(s, a.root, held);
}

// Scatter: the mirror image; a leaf receives straight into recv, an inner rank its subtree into
// scratch, and each keeps its own block.
void tree_scatter(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const int v = mod(s.rank - a.root, s.ranks), end = subtree_end(v, s.ranks);
  RelativeBlocks held{.s = s, .buf = nullptr, .count = a.count, .root = a.root, .base = v};
  if (v == 0) {
    held.buf = static_cast<std::byte*>(const_cast<void*>(a.send));
    held.whole = true;
  } else {
    held.buf = end - v == 1 ? static_cast<std::byte*>(a.recv) : s.scratch((end - v) * a.count);
  }
  binomial_scatter(s, a.root, held);
  s.copy(a.recv, held.at(v), a.count);
}

// ---- naive: the root does everything ------------------------------------------------------------

// The root combines its own data with rank root+1's, then root+2's, ... in that order.
void naive_reduce_to(const Sched& s, const void* send, std::byte* acc, size_t count, int root) {
  if (s.rank != root) {
    s.send(root, send, count);
    return;
  }
  const void* held = send;
  for (int i = 1; i < s.ranks; ++i) {
    s.recv_reduce(mod(root + i, s.ranks), acc, held, count);
    held = acc;
  }
}

void naive_broadcast_from(const Sched& s, const void* root_src, void* buf, size_t count, int root) {
  if (s.rank == root) {
    for (int i = 1; i < s.ranks; ++i) s.send(mod(root + i, s.ranks), root_src, count);
  } else {
    s.recv(root, buf, count);
  }
}

void naive_all_reduce(const Sched& s) {
  std::byte* recv = static_cast<std::byte*>(s.args.recv);
  naive_reduce_to(s, s.args.send, recv, s.args.count, 0);
  if (s.rank == 0) s.finish_avg(recv, s.args.count);
  naive_broadcast_from(s, recv, recv, s.args.count, 0);
}

void naive_reduce(const Sched& s) {
  const CollectiveArgs& a = s.args;
  naive_reduce_to(s, a.send, static_cast<std::byte*>(a.recv), a.count, a.root);
  if (s.rank == a.root) s.finish_avg(a.recv, a.count);
}

void naive_broadcast(const Sched& s) {
  const CollectiveArgs& a = s.args;
  if (s.rank == a.root) s.copy(a.recv, a.send, a.count);
  naive_broadcast_from(s, a.send, a.recv, a.count, a.root);
}

void naive_all_gather(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const size_t c = a.count;
  if (s.rank == 0) {
    s.copy(a.recv, a.send, c);
    for (int q = 1; q < s.ranks; ++q) s.recv(q, s.at(a.recv, q * c), c);
  } else {
    s.send(0, a.send, c);
  }
  naive_broadcast_from(s, a.recv, a.recv, c * s.ranks, 0);
}

void naive_reduce_scatter(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const size_t c = a.count;
  std::byte* acc = s.rank == 0 ? s.scratch(c * s.ranks) : nullptr;
  naive_reduce_to(s, a.send, acc, c * s.ranks, 0);
  if (s.rank == 0) {
    for (int q = 1; q < s.ranks; ++q) s.send(q, s.at(acc, q * c), c);
    s.copy(a.recv, acc, c);
  } else {
    s.recv(0, a.recv, c);
  }
  s.finish_avg(a.recv, c);
}

// Gather: the root receives from root+1, root+2, ... in turn, straight into their places.
void naive_gather(const Sched& s) {
  const CollectiveArgs& a = s.args;
  if (s.rank != a.root) return s.send(a.root, a.send, a.count);
  s.copy(s.at(a.recv, a.root * a.count), a.send, a.count);
  for (int i = 1; i < s.ranks; ++i) {
    const int q = mod(a.root + i, s.ranks);
    s.recv(q, s.at(a.recv, q * a.count), a.count);
  }
}

// Scatter: the root sends to root+1, root+2, ... in turn.
void naive_scatter(const Sched& s) {
  const CollectiveArgs& a = s.args;
  if (s.rank != a.root) return s.recv(a.root, a.recv, a.count);
  for (int i = 1; i < s.ranks; ++i) {
    const int q = mod(a.root + i, s.ranks);
    s.send(q, s.at(a.send, q * a.count), a.count);
  }
  s.copy(a.recv, s.at(a.send, a.root * a.count), a.count);
}

}  // namespace

constinit const Schedules kTreeSchedules = {.all_reduce = tree_all_reduce,
                                            .broadcast = tree_broadcast,
                                            .reduce = tree_reduce,
                                            .all_gather = tree_all_gather,
                                            .reduce_scatter = tree_reduce_scatter,
                                            .gather = tree_gather,
                                            .scatter = tree_scatter};

constinit const Schedules kNaiveSchedules = {.all_reduce = naive_all_reduce,
                                             .broadcast = naive_broadcast,
                                             .reduce = naive_reduce,
                                             .all_gather = naive_all_gather,
                                             .reduce_scatter = naive_reduce_scatter,
                                             .gather = naive_gather,
                                             .scatter = naive_scatter};

}  // namespace dpx::parallel::impl
