// Naive schedules: every rank talks to the root only, which reduces in rank order and sends the
// result to each rank in turn — the baseline the others are measured against; and their cost terms.
#include "parallel/comm/algorithms/schedule.hpp"

namespace dpx::parallel::impl {

namespace {

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

// ---- the cost terms of the schedules above (cost.hpp) -------------------------------------------

CostTerms all_reduce_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(2 * (v.P - 1), 2 * (v.P - 1) * v.n, (v.P - 1) * v.n);
}

CostTerms broadcast_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(v.P - 1, (v.P - 1) * v.n);
}

CostTerms reduce_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(v.P - 1, (v.P - 1) * v.n, (v.P - 1) * v.n);
}

CostTerms all_gather_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(2 * (v.P - 1), v.ring + (v.P - 1) * v.n);
}

CostTerms reduce_scatter_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(2 * (v.P - 1), (v.P - 1) * v.n + v.ring, (v.P - 1) * v.n);
}

CostTerms gather_cost(const CallShape& s) {  // gather and scatter
  const CostVars v(s);
  return CostTerms{}.step(v.P - 1, v.ring);
}

}  // namespace

constinit const Schedules naive_schedules = {
    .all_reduce = {naive_all_reduce, all_reduce_cost, "2(p-1) a + 2(p-1) n b + (p-1) n g"},
    .broadcast = {naive_broadcast, broadcast_cost, "(p-1) a + (p-1) n b"},
    .reduce = {naive_reduce, reduce_cost, "(p-1) a + (p-1) n b + (p-1) n g"},
    .all_gather = {naive_all_gather, all_gather_cost, "2(p-1) a + ((p-1)/p + p-1) n b"},
    .reduce_scatter = {naive_reduce_scatter, reduce_scatter_cost, "2(p-1) a + (p-1 + (p-1)/p) n b + (p-1) n g"},
    .gather = {naive_gather, gather_cost, "(p-1) a + (p-1)/p n b"},
    .scatter = {naive_scatter, gather_cost, "(p-1) a + (p-1)/p n b"},
};

}  // namespace dpx::parallel::impl
