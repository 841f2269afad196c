// Private to parallel/algorithms*.cpp: the step vocabulary the schedules are written in (send,
// receive, receive-and-reduce, in element counts) and block partitions of a buffer.
#pragma once
#include <vector>

#include "parallel/comm/algorithms/algorithms.hpp"
#include "parallel/comm/algorithms/cost.hpp"

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

// One rank's view of a call: its transport, rank, and the element type the steps move.
struct Sched {
  Sched(Transport& transport, const CollectiveArgs& args, Workspace& workspace);

  Transport& transport;
  const CollectiveArgs& args;
  Workspace& workspace;
  const int ranks;         // in the communicator
  const int rank;          // this one's
  const size_t elem_size;  // bytes of one element of args.dtype
  const ReduceOp op;       // the per-step op: avg is reduced as sum

  std::byte* at(void* p, size_t elem) const { return static_cast<std::byte*>(p) + elem * elem_size; }
  const std::byte* at(const void* p, size_t elem) const {
    return static_cast<const std::byte*>(p) + elem * elem_size;
  }
  // Scratch, copies and the average's division go through the transport, which knows where
  // the buffers live (host memory, or a GPU for p2p).
  std::byte* scratch(size_t elems, int slot = 0) const {
    std::byte* p = transport.scratch(elems * elem_size, slot);
    return p ? p : workspace.get(elems * elem_size, slot);
  }
  void copy(void* dst, const void* src, size_t elems) const {
    if (dst != src && elems > 0) transport.copy_local(dst, src, elems * elem_size);
  }
  void finish_avg(void* p, size_t elems) const {
    if (args.op == ReduceOp::avg) transport.average_local(p, elems, args.dtype, ranks);
  }

  void send(int peer, const void* p, size_t elems) const;
  void recv(int peer, void* p, size_t elems) const;
  // dst = local (op) incoming
  void recv_reduce(int peer, void* dst, const void* local, size_t elems) const;
  void sendrecv(int to, const void* p, size_t send_elems, int from, void* dst, size_t recv_elems) const;
  void sendrecv_reduce(int to, const void* p, size_t send_elems, int from, void* dst, const void* local,
                       size_t recv_elems) const;

 private:
  Exchange exchange(int to, const void* p, size_t send_elems, int from, void* dst, size_t recv_elems) const;
};

// Per-rank blocks of count elements, addressed by rank relative to a root (block u belongs to
// rank u + root mod n), as gathers and scatters move them: a range [lo, hi) of blocks travels as
// one message. The buffer holds either the blocks from relative rank `base` on, in order (a
// subtree's blocks, or one rank's own), or, for `whole`, all n blocks at their real ranks'
// places (the root's buffer; every rank's with root 0): there a range that passes block n-1
// continues at block 0 and goes through scratch (slot 0, so buf must not be it when root != 0),
// still as one message.
struct RelativeBlocks {
  const Sched& s;
  std::byte* buf;
  size_t count;    // elements per block
  int root = 0;
  int base = 0;    // not whole: buf starts at relative block base
  bool whole = false;

  std::byte* at(int u) const;  // relative block u (whole: real block u + root mod n)
  void send(int peer, int lo, int hi) const;
  void recv(int peer, int lo, int hi) const;
};
// Where a participant of a rooted gather or scatter keeps relative blocks [lo, hi): the root in
// its whole buffer, a participant of one block in `own`, any other in scratch.
RelativeBlocks held_blocks(const Sched& s, bool is_root, int lo, int hi, std::byte* whole, std::byte* own);

// One collective as an algorithm runs it: its schedule (for ranks >= 2 and count > 0), and the
// cost terms of its busiest rank (cost.hpp) with their formula in words.
using Schedule = void (*)(const Sched& s);
struct Step {
  Schedule run = nullptr;
  CostTerms (*cost)(const CallShape& shape) = nullptr;
  const char* formula = "";
};
// One algorithm's steps, one per collective it applies to (a null run: it does not).
struct Schedules {
  Step all_reduce{}, broadcast{}, reduce{}, all_gather{}, reduce_scatter{}, sendrecv{}, all_to_all{}, gather{}, scatter{};
};
#define DPX_ALGORITHM(name, summary) extern const Schedules name##_schedules;
#define DPX_LIBRARY(name, built, summary, missing)
#include "parallel/comm/algorithms/algorithms.def"
#undef DPX_ALGORITHM
#undef DPX_LIBRARY

// The step of `table` for `kind`, or nullptr where it has none (barrier, send, recv; a pattern
// the algorithm does not apply to).
const Step* step_for(const Schedules& table, Collective kind);

}  // namespace dpx::parallel::impl
