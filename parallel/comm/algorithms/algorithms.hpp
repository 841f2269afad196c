// dpx's collective algorithms, each written once as a schedule of point-to-point exchanges over
// a Transport, so every backend that can send and receive (threads, MPI, CUDA p2p) reuses them;
// and the name of the vendor path (the MPI library's own collectives) that backends may offer.
// Every schedule is fixed for a given (collective, algorithm, size, rank count), so the order in
// which values are combined is too: results are bitwise identical from run to run. The
// algorithms and their costs: Thakur, Rabenseifner & Gropp, IJHPCA 2005 (docs/ARCHITECTURE.md).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/dtype.hpp"
#include "parallel/comm/backend.hpp"
#include "parallel/comm/transport.hpp"

namespace dpx::parallel {

// How a collective is computed, selectable per call or per communicator: one value per row of
// algorithms.def (what each one does: the comment that opens its file in this folder).
enum class Algorithm : uint8_t {
#define DPX_ALGORITHM(name, summary) name,
#define DPX_LIBRARY(name, built, summary, missing) name,
#include "parallel/comm/algorithms/algorithms.def"
#undef DPX_ALGORITHM
#undef DPX_LIBRARY
};
// dpx's own algorithms: every backend runs them over its Transport.
inline constexpr std::array kAlgorithms = {
#define DPX_ALGORITHM(name, summary) Algorithm::name,
#define DPX_LIBRARY(name, built, summary, missing)
#include "parallel/comm/algorithms/algorithms.def"
#undef DPX_ALGORITHM
#undef DPX_LIBRARY
};

namespace impl {
struct Schedules;  // schedule.hpp
}

// An algorithm's row of the registry (algorithms.def).
struct AlgorithmInfo {
  Algorithm algorithm;
  std::string_view name;
  std::string_view summary;          // for --help; may be empty
  const impl::Schedules* schedules;  // dpx's own; null: a library's collectives
  bool built;                        // false: a library this dpx was built without
  std::string_view missing;          // then: what it lacks and how to build it
};
const AlgorithmInfo& algorithm_info(Algorithm a);

std::string_view algorithm_name(Algorithm a);
// One of the built algorithms by its name; throws dpx::UsageError otherwise, saying so when a
// library is asked of a dpx built without it.
Algorithm parse_algorithm(std::string_view name);
// The names parse_algorithm takes, with their summaries, for help texts and errors: "ring, tree,
// naive, rhd, hier (inside nodes, then across), mpi (the MPI library's own; ...) or nccl (...)".
std::string algorithm_choices();
// True for the vendor paths (a library's collectives), which only their own backend runs.
inline bool is_library_algorithm(Algorithm a) { return algorithm_info(a).schedules == nullptr; }
// "sum", "prod", "max", "min" or "avg"; throws dpx::UsageError otherwise.
ReduceOp parse_reduce_op(std::string_view name);

// The collectives, then the point-to-point calls. The four patterns after recv are nccl-tests'
// sendrecv, alltoall, gather and scatter (added last, so the older kinds keep their numbers):
//   sendrecv:   every rank sends count elements to rank r+1 and receives count from r-1 at once
//   all_to_all: block q (count elements) of rank r's send goes to block r of rank q's recv
//   gather:     every rank's count elements land at the root, in rank order
//   scatter:    block r of the root's send (count elements each) goes to rank r
enum class Collective : uint8_t {
  all_reduce, broadcast, reduce, all_gather, reduce_scatter, barrier, send, recv,
  sendrecv, all_to_all, gather, scatter
};
inline constexpr int kCollectiveKinds = 12;
// The collectives `dpx collective -t` measures, in the order help texts list them.
inline constexpr std::array<Collective, 9> kBenchCollectives = {
    Collective::all_reduce, Collective::broadcast, Collective::reduce,     Collective::all_gather,
    Collective::reduce_scatter, Collective::sendrecv, Collective::all_to_all, Collective::gather,
    Collective::scatter};
std::string_view collective_name(Collective c);
// One of kBenchCollectives by its name, also without underscores (as NCCL and nccl-tests spell
// them: allreduce, alltoall) and send_recv; throws dpx::UsageError otherwise.
Collective parse_collective(std::string_view name);
// The collectives with a root (broadcast, reduce, gather, scatter).
constexpr bool is_rooted(Collective c) {
  return c == Collective::broadcast || c == Collective::reduce || c == Collective::gather || c == Collective::scatter;
}
// Whether `algo` has a schedule for `c`: every algorithm for the five older collectives; ring
// alone for sendrecv and all_to_all; tree, naive and rhd for gather and scatter; mpi (the
// library's call) for all nine.
bool algorithm_applies(Algorithm algo, Collective c);
// The algorithms that apply to `c`, for errors and help: "tree, naive, rhd or mpi", with mpi
// where it is built.
std::string algorithm_choices(Collective c);
// The algorithm a call of `c` without its own runs: `preferred` (a communicator's default) if
// it applies, else the first of kAlgorithms that does (gather and scatter under a ring
// default: tree).
Algorithm algorithm_for(Collective c, Algorithm preferred);

// One call, as an algorithm sees it (validated by the Communicator). `count` is per rank where
// the collective has per-rank blocks (all_gather and gather: send count; reduce_scatter and
// scatter: receive count; all_to_all: the count of each block), otherwise the whole buffer.
// Buffer conventions are NCCL's (see communicator.hpp).
struct CollectiveArgs {
  Collective kind = Collective::all_reduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
};

// Scratch memory one rank's algorithms reuse from call to call (partial sums on non-root ranks).
// Two independent slots: a schedule that keeps a buffer in slot 1 (hier) may run other
// schedules, which use slot 0, in the meantime.
class Workspace {
 public:
  // At least `bytes` bytes, 64-byte aligned; valid until the next get() of the same slot.
  std::byte* get(size_t bytes, int slot = 0);

 private:
  struct Free { void operator()(std::byte* p) const; };
  struct Slot {
    std::unique_ptr<std::byte, Free> data;
    size_t bytes = 0;
  };
  std::array<Slot, 2> slots_;
};

// One call as stall reports describe it (parallel/runtime/stall_report.hpp): which collective, the how
// many-th on its communicator, how large.
struct CommCall {
  Collective kind = Collective::barrier;
  uint64_t seq = 0;        // 1, 2, ...: every rank numbers its communicator's collectives alike; 0 for send/recv
  size_t bytes = 0;        // this rank's payload; for per-rank blocks all of them (all_gather, gather:
                           // the gathered size; reduce_scatter, scatter, all_to_all: the whole input)
  DType dtype = DType::u8;
  Algorithm algo = Algorithm::ring;
  int root = -1;           // broadcast, reduce, gather and scatter
  int peer = -1;           // send and recv
  bool patient = false;    // a wait for ranks known to work long outside communication: no timeout
};

// Runs args.kind (a collective `algo` applies to) with one of dpx's algorithms on this rank.
void run_algorithm(Algorithm algo, Transport& t, const CollectiveArgs& args, Workspace& ws);

}  // namespace dpx::parallel
