// Private to parallel/algorithms*.cpp: the step vocabulary the schedules are written in (send,
// receive, receive-and-reduce, in element counts) and block partitions of a buffer.
#pragma once
#include <cstring>
#include <vector>

#include "parallel/algorithms.hpp"

namespace dpx::parallel::impl {

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Contiguous blocks of a buffer, in elements: block i is [begin(i), begin(i) + size(i)).
struct Blocks {
  std::vector<size_t> off;  // parts + 1 offsets
  size_t begin(int i) const { return off[static_cast<size_t>(i)]; }
  size_t size(int i) const { return off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]; }
  // Elements of blocks [lo, hi).
  size_t span(int lo, int hi) const { return off[static_cast<size_t>(hi)] - off[static_cast<size_t>(lo)]; }
};
// count elements in `parts` blocks whose sizes differ by at most one (larger blocks first).
Blocks even_blocks(size_t count, int parts);
// `parts` blocks of per_block elements each (all_gather / reduce_scatter).
Blocks uniform_blocks(size_t per_block, int parts);

// One rank's view of a call: its transport, rank, and the element type the steps move.
struct Sched {
  Sched(Transport& transport, const CollectiveArgs& args, Workspace& workspace);

  Transport& t;
  const CollectiveArgs& a;
  Workspace& ws;
  const int n, r;
  const size_t esize;
  const ReduceOp op;  // the per-step op: avg is reduced as sum

  std::byte* at(void* p, size_t elem) const { return static_cast<std::byte*>(p) + elem * esize; }
  const std::byte* at(const void* p, size_t elem) const { return static_cast<const std::byte*>(p) + elem * esize; }
  std::byte* scratch(size_t elems) const { return ws.get(elems * esize); }
  void copy(void* dst, const void* src, size_t elems) const {
    if (dst != src && elems > 0) std::memcpy(dst, src, elems * esize);
  }
  void finish_avg(void* p, size_t elems) const {
    if (a.op == ReduceOp::avg) finish_average(p, elems, a.dtype, n);
  }

  void send(int peer, const void* p, size_t elems) const;
  void recv(int peer, void* p, size_t elems) const;
  // dst = local (op) incoming
  void recv_reduce(int peer, void* dst, const void* local, size_t elems) const;
  void sendrecv(int to, const void* p, size_t send_elems, int from, void* dst, size_t recv_elems) const;
  void sendrecv_reduce(int to, const void* p, size_t send_elems, int from, void* dst, const void* local,
                       size_t recv_elems) const;
};

// One entry point per algorithm; each handles the five collectives for n >= 2 and count > 0.
void ring_collective(Sched& s);
void tree_collective(Sched& s);
void naive_collective(Sched& s);
void rhd_collective(Sched& s);
void hier_collective(Sched& s);

}  // namespace dpx::parallel::impl
