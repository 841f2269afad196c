// The cost model of every (collective, algorithm) of dpx's own stays true: on p = 2..8 thread
// ranks, the busiest rank's exchanges (latency terms) and bytes, as the communicator counts them,
// are the closed forms written here (Thakur, Rabenseifner & Gropp's alpha-beta counts).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "parallel/threads_backend.hpp"
#include "test_collective_util.hpp"

using namespace dpx;
using namespace dpx::parallel;
using namespace dpx::testing;

namespace {

// Elements per call: divisible by every p' <= 8, so every block partition is even.
constexpr size_t kCount = 840;
constexpr size_t kElem = sizeof(float);

// What one rank did in one call.
struct Counts {
  uint64_t exchanges = 0, sent = 0, received = 0;
  uint64_t bytes() const { return std::max(sent, received); }
};

// The cost of one call: the most exchanges any rank makes, and the most bytes any rank sends
// or receives (max over ranks of max(sent, received)).
struct Cost {
  uint64_t exchanges = 0;
  uint64_t bytes = 0;
};

int ceil_log2(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}
int floor_log2(int p) { return ceil_log2(p + 1) - 1; }

// Runs `kind` with `algo` on p ranks (root p-1 where there is one) and returns every rank's counts.
std::vector<Counts> measure(Collective kind, Algorithm algo, int p) {
  std::vector<Counts> counts(static_cast<size_t>(p));
  run_ranks(p, [&](Communicator& comm) {
    const size_t c = kCount, whole = c * static_cast<size_t>(p);
    std::vector<float> a(whole, 1.f), b(whole, 0.f);
    const int root = p - 1;
    comm.reset_stats();
    switch (kind) {
      case Collective::all_reduce: comm.all_reduce(a.data(), b.data(), c, DType::f32, ReduceOp::sum, algo); break;
      case Collective::broadcast: comm.broadcast(a.data(), b.data(), c, DType::f32, root, algo); break;
      case Collective::reduce: comm.reduce(a.data(), b.data(), c, DType::f32, ReduceOp::sum, root, algo); break;
      case Collective::all_gather: comm.all_gather(a.data(), b.data(), c, DType::f32, algo); break;
      case Collective::reduce_scatter:
        comm.reduce_scatter(a.data(), b.data(), c, DType::f32, ReduceOp::sum, algo);
        break;
      case Collective::sendrecv: comm.sendrecv(a.data(), b.data(), c, DType::f32, algo); break;
      case Collective::all_to_all: comm.all_to_all(a.data(), b.data(), c, DType::f32, algo); break;
      case Collective::gather: comm.gather(a.data(), b.data(), c, DType::f32, root, algo); break;
      case Collective::scatter: comm.scatter(a.data(), b.data(), c, DType::f32, root, algo); break;
      default: break;
    }
    const CommStats s = comm.stats();
    counts[static_cast<size_t>(comm.rank())] = {s.exchanges, s.bytes_sent, s.bytes_received};
  });
  return counts;
}

Cost busiest(const std::vector<Counts>& counts) {
  Cost cost;
  for (const Counts& c : counts) {
    cost.exchanges = std::max(cost.exchanges, c.exchanges);
    cost.bytes = std::max(cost.bytes, c.bytes());
  }
  return cost;
}

// The closed forms, for root p-1 (a rooted call) and even blocks. N is the whole buffer in
// bytes: count * elem for all_reduce, broadcast, reduce and sendrecv, p * count * elem for the
// collectives with per-rank blocks (all_gather, reduce_scatter, all_to_all, gather, scatter).
// L = ceil(log2 p); l = floor(log2 p) and rem = p - 2^l for rhd, whose 2^l participants are
// relative ranks [first(j), first(j+1)) and whose rem extras each fold into a partner.
// hier runs on one node here (thread ranks): a tree inside it.
std::optional<Cost> expected(Collective kind, Algorithm algo, int p) {
  const bool blocks = kind == Collective::all_gather || kind == Collective::reduce_scatter ||
                      kind == Collective::all_to_all || kind == Collective::gather || kind == Collective::scatter;
  const uint64_t N = kCount * kElem * (blocks ? static_cast<uint64_t>(p) : 1), P = static_cast<uint64_t>(p);
  const uint64_t L = static_cast<uint64_t>(ceil_log2(p)), l = static_cast<uint64_t>(floor_log2(p));
  const uint64_t rem = P - (uint64_t{1} << l), folds = rem > 0 ? 1 : 0;
  const uint64_t rhd_2halves = 2 * ((uint64_t{1} << l) - 1) * N >> l;  // 2 (2^l - 1) / 2^l * N
  // rhd all_gather / reduce_scatter: participant 0's ranges, first(2^t) ranks' blocks at step t.
  uint64_t rhd_ranges = 0;
  for (uint64_t t = 0; t < l; ++t) {
    const uint64_t q = uint64_t{1} << t;
    rhd_ranges += (q < rem ? 2 * q : q + rem) * (N / P);
  }
  using C = Collective;
  using A = Algorithm;
  switch (algo) {
    case A::ring:
      switch (kind) {
        case C::all_reduce: return Cost{2 * (P - 1), 2 * (P - 1) * N / P};
        case C::broadcast: return Cost{std::min<uint64_t>(2, P - 1), N};  // one pipeline chunk (< 1 MiB)
        case C::reduce: return Cost{2 * (P - 1), 2 * (P - 1) * N / P};   // reduce-scatter, then p-1 blocks to the root
        case C::all_gather:
        case C::reduce_scatter: return Cost{P - 1, (P - 1) * N / P};
        case C::sendrecv: return Cost{1, N};                              // one exchange of N each way
        case C::all_to_all: return Cost{P - 1, (P - 1) * N / P};         // p-1 exchanges of N/p each way
        default: return {};
      }
    case A::tree:
      switch (kind) {
        case C::all_reduce: return Cost{2 * L, L * N};
        case C::broadcast:
        case C::reduce: return Cost{L, L * N};
        case C::all_gather:
        case C::reduce_scatter: return Cost{2 * L, L * N};  // the root gathers (scatters) and broadcasts (reduces) N
        case C::gather:
        case C::scatter: return Cost{L, (P - 1) * N / P};   // the root receives (sends) all blocks but its own
        default: return {};
      }
    case A::naive:
      switch (kind) {
        case C::all_reduce: return Cost{2 * (P - 1), (P - 1) * N};
        case C::broadcast:
        case C::reduce: return Cost{P - 1, (P - 1) * N};
        case C::all_gather:
        case C::reduce_scatter: return Cost{2 * (P - 1), (P - 1) * N};
        case C::gather:
        case C::scatter: return Cost{P - 1, (P - 1) * N / P};  // p-1 exchanges of N/p at the root
        default: return {};
      }
    case A::rhd:
      switch (kind) {
        case C::all_reduce: return Cost{2 * l + 2 * folds, rhd_2halves + folds * N};
        case C::broadcast:
        case C::reduce: return Cost{2 * l + folds, rhd_2halves + folds * N};
        case C::all_gather:
        case C::reduce_scatter: return Cost{l + 2 * folds, rhd_ranges + folds * N};
        case C::gather:
        case C::scatter: return Cost{L, (P - 1) * N / P};  // l steps + the extra partner's block: ceil(log2 p)
        default: return {};
      }
    case A::hier:  // one node: inside it, trees, and for broadcast and reduce a hop between root and leader
      switch (kind) {
        case C::all_reduce: return Cost{2 * L, L * N};
        case C::broadcast:
        case C::reduce: return Cost{L + 1, L * N};
        case C::all_gather:
        case C::reduce_scatter: return Cost{(P - 1) + L, L * N};  // naive gather (scatter) + tree broadcast (reduce)
        default: return {};
      }
    case A::mpi: break;
  }
  return {};
}

}  // namespace

TEST_CASE("every algorithm's busiest rank makes the exchanges and moves the bytes of its cost model, p = 2..8") {
  Watchdog dog(60, "cost model");
  int pairs = 0;
  for (Collective kind : kBenchCollectives) {
    for (Algorithm algo : kAlgorithms) {
      if (!algorithm_applies(algo, kind)) continue;
      ++pairs;
      for (int p = 2; p <= 8; ++p) {
        CAPTURE(collective_name(kind));
        CAPTURE(algorithm_name(algo));
        CAPTURE(p);
        const std::optional<Cost> want = expected(kind, algo, p);
        REQUIRE(want.has_value());
        const std::vector<Counts> counts = measure(kind, algo, p);
        const Cost got = busiest(counts);
        CHECK(got.exchanges == want->exchanges);
        CHECK(got.bytes == want->bytes);
        // The rooted patterns' busiest rank is the root, which only receives (gather) or sends (scatter).
        if (kind == Collective::gather || kind == Collective::scatter) {
          const Counts& root = counts.back();
          CHECK(root.exchanges == want->exchanges);
          CHECK((kind == Collective::gather ? root.received : root.sent) == want->bytes);
          CHECK((kind == Collective::gather ? root.sent : root.received) == 0);
        }
      }
    }
  }
  CHECK(pairs == 5 * 5 + 8);
}
