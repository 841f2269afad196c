// dpx's collective algorithms, each written once as a schedule of point-to-point exchanges over
// a Transport, so every backend that can send and receive (threads, MPI, CUDA p2p) reuses them.
// Every schedule is fixed for a given (collective, algorithm, size, rank count), so the order in
// which values are combined is too: results are bitwise identical from run to run.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/dtype.hpp"
#include "parallel/comm_reduce.hpp"
#include "parallel/comm_transport.hpp"

namespace dpx::parallel {

// How a collective is computed, selectable per call or per communicator.
//   ring:  reduce-scatter then all-gather around a ring (bandwidth-optimal, 2(n-1) steps)
//   tree:  binomial-tree reduce to a root, then binomial-tree broadcast (log2 n steps each)
//   naive: everything to the root, reduced there in rank order, then sent out one by one
//   rhd:   recursive halving/doubling (Rabenseifner); when n is not a power of two, the extra
//          ranks first fold their data into a partner and get the result back at the end
enum class Algorithm : uint8_t { ring, tree, naive, rhd };
inline constexpr std::array<Algorithm, 4> kAlgorithms = {Algorithm::ring, Algorithm::tree, Algorithm::naive,
                                                         Algorithm::rhd};
std::string_view algorithm_name(Algorithm a);
// "ring", "tree", "naive" or "rhd"; throws dpx::UsageError otherwise.
Algorithm parse_algorithm(std::string_view name);
// "sum", "prod", "max", "min" or "avg"; throws dpx::UsageError otherwise.
ReduceOp parse_reduce_op(std::string_view name);

enum class Collective : uint8_t { all_reduce, broadcast, reduce, all_gather, reduce_scatter, barrier, send, recv };
inline constexpr int kCollectiveKinds = 8;
std::string_view collective_name(Collective c);
// all_reduce, broadcast, reduce, all_gather, reduce_scatter (also without the underscore);
// throws dpx::UsageError otherwise.
Collective parse_collective(std::string_view name);

// One call, as an algorithm sees it (validated by the Communicator). `count` is per rank where
// the collective has per-rank blocks (all_gather: send count; reduce_scatter: receive count),
// otherwise the whole buffer. Buffer conventions are NCCL's (see communicator.hpp).
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
class Workspace {
 public:
  // At least `bytes` bytes, 64-byte aligned; valid until the next call.
  std::byte* get(size_t bytes);

 private:
  struct Free { void operator()(std::byte* p) const; };
  std::unique_ptr<std::byte, Free> data_;
  size_t bytes_ = 0;
};

// Runs args.kind (one of the five collectives) with `algo` on this rank.
void run_algorithm(Algorithm algo, Transport& t, const CollectiveArgs& args, Workspace& ws);

}  // namespace dpx::parallel
