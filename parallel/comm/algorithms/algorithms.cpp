// The algorithm registry (algorithms.def): names, parsing, the one dispatch from (algorithm,
// collective) to a schedule, the one-rank and empty cases every algorithm shares, and the step
// vocabulary of schedule.hpp.
#include "parallel/comm/algorithms/algorithms.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

#include "core/error.hpp"
#include "parallel/comm/algorithms/schedule.hpp"

namespace dpx::parallel {

namespace {

constinit const AlgorithmInfo kRegistry[] = {
#define DPX_ALGORITHM(name, summary) {Algorithm::name, #name, summary, &impl::name##_schedules, true, ""},
#define DPX_LIBRARY(name, built, summary, missing) {Algorithm::name, #name, summary, nullptr, built, missing},
#include "parallel/comm/algorithms/algorithms.def"
#undef DPX_ALGORITHM
#undef DPX_LIBRARY
};

// "a, b (what b is) or c": the built algorithms `keep` admits, with their summaries or without.
template <typename Keep>
std::string list_of(Keep keep, bool summaries) {
  std::vector<std::string> names;
  for (const AlgorithmInfo& a : kRegistry)
    if (a.built && keep(a))
      names.push_back(!summaries || a.summary.empty() ? std::string(a.name) : detail::concat(a.name, " (", a.summary, ")"));
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += detail::concat(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ", names[i]);
  return s;
}

}  // namespace

const AlgorithmInfo& algorithm_info(Algorithm a) { return kRegistry[static_cast<size_t>(a)]; }

std::string_view algorithm_name(Algorithm a) { return algorithm_info(a).name; }

std::string algorithm_choices() {
  return list_of([](const AlgorithmInfo&) { return true; }, true);
}

Algorithm parse_algorithm(std::string_view name) {
  for (const AlgorithmInfo& a : kRegistry) {
    if (name != a.name) continue;
    if (!a.built) usage_fail("algorithm '", name, "' (", a.summary, "): not built (", a.missing, ")");
    return a.algorithm;
  }
  usage_fail("unknown algorithm '", name, "': use ", algorithm_choices());
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min, ReduceOp::avg})
    if (name == reduce_op_name(op)) return op;
  usage_fail("unknown reduction op '", name, "': use sum, prod, max, min or avg");
}

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::broadcast: return "broadcast";
    case Collective::reduce: return "reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::barrier: return "barrier";
    case Collective::send: return "send";
    case Collective::recv: return "recv";
    case Collective::sendrecv: return "sendrecv";
    case Collective::all_to_all: return "all_to_all";
    case Collective::gather: return "gather";
    case Collective::scatter: return "scatter";
  }
  return "?";
}

Collective parse_collective(std::string_view name) {
  for (Collective c : kBenchCollectives) {
    std::string_view full = collective_name(c);
    std::string squashed;  // "allreduce", "alltoall", as NCCL and nccl-tests spell them
    for (char ch : full)
      if (ch != '_') squashed += ch;
    if (name == full || name == squashed) return c;
  }
  if (name == "send_recv") return Collective::sendrecv;
  usage_fail("unknown collective '", name,
             "': use all_reduce, broadcast, reduce, all_gather, reduce_scatter, sendrecv, all_to_all, gather or "
             "scatter");
}

bool algorithm_applies(Algorithm algo, Collective c) {
  const impl::Schedules* table = algorithm_info(algo).schedules;
  if (!table)
    return std::find(kBenchCollectives.begin(), kBenchCollectives.end(), c) != kBenchCollectives.end();
  const impl::Step* step = impl::step_for(*table, c);
  return step != nullptr && step->run != nullptr;
}

std::string algorithm_choices(Collective c) {
  return list_of([c](const AlgorithmInfo& a) { return a.schedules ? algorithm_applies(a.algorithm, c) : a.name == "mpi"; },
                 false);
}

Algorithm algorithm_for(Collective c, Algorithm preferred) {
  if (algorithm_applies(preferred, c)) return preferred;
  for (Algorithm a : kAlgorithms)
    if (algorithm_applies(a, c)) return a;
  return preferred;
}

void Workspace::Free::operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{64}); }

std::byte* Workspace::get(size_t bytes, int slot) {
  Slot& s = slots_.at(static_cast<size_t>(slot));
  if (bytes > s.bytes) {
    s.data.reset();
    s.data.reset(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{64})));
    s.bytes = bytes;
  }
  return s.data.get();
}

void run_algorithm(Algorithm algo, Transport& t, const CollectiveArgs& args, Workspace& ws) {
  if (!is_library_algorithm(algo) && !algorithm_applies(algo, args.kind))  // alike for every size and rank count
    fail(algorithm_name(algo), ": ", collective_name(args.kind), " has no ", algorithm_name(algo), " schedule (use ",
         algorithm_choices(args.kind), ")");
  impl::Sched s(t, args, ws);
  if (args.count == 0) return;
  if (s.ranks == 1) {  // every collective is a copy of this rank's own data
    if (args.kind != Collective::reduce || args.recv) s.copy(args.recv, args.send, args.count);
    return;
  }
  const impl::Schedules* table = algorithm_info(algo).schedules;
  if (table == nullptr)
    fail("--algo ", algorithm_name(algo), ": the ", t.name(), " backend does not have the ", algorithm_name(algo),
         " library's collectives (they exist with --backend ", algorithm_name(algo),
         algo == Algorithm::mpi ? ", under mpirun)" : ")");
  impl::step_for(*table, args.kind)->run(s);
}

namespace impl {

const Step* step_for(const Schedules& table, Collective kind) {
  switch (kind) {
    case Collective::all_reduce: return &table.all_reduce;
    case Collective::broadcast: return &table.broadcast;
    case Collective::reduce: return &table.reduce;
    case Collective::all_gather: return &table.all_gather;
    case Collective::reduce_scatter: return &table.reduce_scatter;
    case Collective::sendrecv: return &table.sendrecv;
    case Collective::all_to_all: return &table.all_to_all;
    case Collective::gather: return &table.gather;
    case Collective::scatter: return &table.scatter;
    case Collective::barrier:
    case Collective::send:
    case Collective::recv: break;
  }
  return nullptr;
}

Blocks even_blocks(size_t count, int parts) {
  Blocks b;
  b.off.resize(static_cast<size_t>(parts) + 1);
  const size_t q = count / static_cast<size_t>(parts), extra = count % static_cast<size_t>(parts);
  for (size_t i = 0; i < static_cast<size_t>(parts); ++i) b.off[i + 1] = b.off[i] + q + (i < extra ? 1 : 0);
  return b;
}

RelativeBlocks held_blocks(const Sched& s, bool is_root, int lo, int hi, std::byte* whole, std::byte* own) {
  RelativeBlocks held{.s = s, .buf = own, .count = s.args.count, .root = s.args.root, .base = lo, .whole = is_root};
  if (is_root) held.buf = whole;
  else if (hi - lo > 1) held.buf = s.scratch(static_cast<size_t>(hi - lo) * s.args.count);
  return held;
}

std::byte* RelativeBlocks::at(int u) const {
  const int block = whole ? mod(u + root, s.ranks) : u - base;
  return s.at(buf, static_cast<size_t>(block) * count);
}

// A range that wraps round (whole buffers only) is staged in scratch: the root's own block
// never moves, so the range can hold at most n-1 blocks and two pieces.
void RelativeBlocks::send(int peer, int lo, int hi) const {
  const size_t elems = static_cast<size_t>(hi - lo) * count;
  const int first = whole ? mod(lo + root, s.ranks) : 0;
  if (!whole || first + (hi - lo) <= s.ranks) return s.send(peer, at(lo), elems);
  std::byte* tmp = s.scratch(elems);
  const size_t head = static_cast<size_t>(s.ranks - first) * count;
  s.copy(tmp, at(lo), head);
  s.copy(s.at(tmp, head), buf, elems - head);
  s.send(peer, tmp, elems);
}

void RelativeBlocks::recv(int peer, int lo, int hi) const {
  const size_t elems = static_cast<size_t>(hi - lo) * count;
  const int first = whole ? mod(lo + root, s.ranks) : 0;
  if (!whole || first + (hi - lo) <= s.ranks) return s.recv(peer, at(lo), elems);
  std::byte* tmp = s.scratch(elems);
  s.recv(peer, tmp, elems);
  const size_t head = static_cast<size_t>(s.ranks - first) * count;
  s.copy(at(lo), tmp, head);
  s.copy(buf, s.at(tmp, head), elems - head);
}

Sched::Sched(Transport& transport_, const CollectiveArgs& args_, Workspace& workspace_)
    : transport(transport_), args(args_), workspace(workspace_), ranks(transport_.size()), rank(transport_.rank()),
      elem_size(dtype_size(args_.dtype)), op(args_.op == ReduceOp::avg ? ReduceOp::sum : args_.op) {}

void Sched::send(int peer, const void* p, size_t elems) const { sendrecv(peer, p, elems, -1, nullptr, 0); }

void Sched::recv(int peer, void* p, size_t elems) const { sendrecv(-1, nullptr, 0, peer, p, elems); }

void Sched::recv_reduce(int peer, void* dst, const void* local, size_t elems) const {
  sendrecv_reduce(-1, nullptr, 0, peer, dst, local, elems);
}

// One exchange with peers `to` (send_elems from p) and `from` (recv_elems into dst); -1: none.
Exchange Sched::exchange(int to, const void* p, size_t send_elems, int from, void* dst, size_t recv_elems) const {
  Exchange x;
  x.send_peer = to;
  x.send = p;
  x.send_bytes = send_elems * elem_size;
  x.recv_peer = from;
  x.recv = dst;
  x.recv_bytes = recv_elems * elem_size;
  x.dtype = args.dtype;
  return x;
}

void Sched::sendrecv(int to, const void* p, size_t send_elems, int from, void* dst, size_t recv_elems) const {
  transport.exchange(exchange(to, p, send_elems, from, dst, recv_elems));
}

void Sched::sendrecv_reduce(int to, const void* p, size_t send_elems, int from, void* dst, const void* local,
                            size_t recv_elems) const {
  Exchange x = exchange(to, p, send_elems, from, dst, recv_elems);
  x.reduce_with = local;
  x.op = op;
  transport.exchange(x);
}

}  // namespace impl
}  // namespace dpx::parallel
