// The cost model's terms (analysis/cost_model.hpp) against what dpx's schedules really do: every
// (collective, algorithm) on 2..8 thread ranks, at root 0 and p-1, the busiest rank's exchanges,
// bytes (the larger half of each step) and reduced bytes as the transport counts them. For the schedules whose
// busiest rank is on the critical path the counts must match the formula exactly; the pipelined
// ring broadcast's critical path is a chain (p - 2 + C steps) no single rank walks, so there the
// busiest rank makes C + 1 of them.
#include <doctest/doctest.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "analysis/cost_model.hpp"
#include "parallel/comm/threads/threads_backend.hpp"

using namespace dpx;
using namespace dpx::parallel;

namespace {

struct Counted {
  uint64_t exchanges = 0, step_bytes = 0, reduced_bytes = 0;
};

// The busiest rank's counts for one call of `kind` with `algo`, count elements of f32 (per rank
// for the collectives with per-rank blocks, as the benchmark's count column), ranks_per_node for
// hier, the root for the rooted collectives.
Counted count_call(Collective kind, Algorithm algo, int p, size_t count, int ranks_per_node = 0, int root = 0) {
  Counted most;
  std::mutex mu;
  RankOptions ro;
  ro.ranks_per_node = ranks_per_node;
  run_ranks(p, [&](Communicator& comm) {
    const size_t total = count * static_cast<size_t>(p);
    std::vector<float> send(total, 1.0f), recv(total, 0.0f);
    comm.reset_stats();
    switch (kind) {
      case Collective::all_reduce: comm.all_reduce(send.data(), recv.data(), count, DType::f32, ReduceOp::sum, algo); break;
      case Collective::broadcast: comm.broadcast(send.data(), recv.data(), count, DType::f32, root, algo); break;
      case Collective::reduce: comm.reduce(send.data(), recv.data(), count, DType::f32, ReduceOp::sum, root, algo); break;
      case Collective::all_gather: comm.all_gather(send.data(), recv.data(), count, DType::f32, algo); break;
      case Collective::reduce_scatter:
        comm.reduce_scatter(send.data(), recv.data(), count, DType::f32, ReduceOp::sum, algo);
        break;
      case Collective::sendrecv: comm.sendrecv(send.data(), recv.data(), count, DType::f32, algo); break;
      case Collective::all_to_all: comm.all_to_all(send.data(), recv.data(), count, DType::f32, algo); break;
      case Collective::gather: comm.gather(send.data(), recv.data(), count, DType::f32, root, algo); break;
      case Collective::scatter: comm.scatter(send.data(), recv.data(), count, DType::f32, root, algo); break;
      default: FAIL("not a collective of this test");
    }
    const CommStats s = comm.stats();
    std::lock_guard<std::mutex> lock(mu);
    most.exchanges = std::max(most.exchanges, s.exchanges);
    most.step_bytes = std::max(most.step_bytes, s.step_bytes);
    most.reduced_bytes = std::max(most.reduced_bytes, s.reduced_bytes);
  }, ro);
  return most;
}

}  // namespace

TEST_CASE("the cost terms of every schedule are the counts its busiest rank makes") {
  const size_t count = 960;  // divisible by every rank count's blocks, so the terms are exact
  int pairs = 0;
  for (Collective kind : kBenchCollectives)
    for (Algorithm algo : kAlgorithms) {
      if (!algorithm_applies(algo, kind)) continue;
      ++pairs;
      const bool rooted = kind == Collective::broadcast || kind == Collective::reduce || kind == Collective::gather ||
                          kind == Collective::scatter;
      for (int p = 2; p <= 8; ++p)
        for (int per_node : {0, 2, 3}) {
          if (per_node != 0 && (algo != Algorithm::hier || p % per_node != 0)) continue;  // even nodes only
          // hier sends a root that is not its node's leader to the leader first: one more step than
          // the formula (which takes the root to be rank 0), so hier is checked at root 0 only.
          for (int root : {0, p - 1}) {
            if (root != 0 && (!rooted || algo == Algorithm::hier)) continue;
            const bool per_rank = kind != Collective::all_reduce && kind != Collective::broadcast &&
                                  kind != Collective::reduce && kind != Collective::sendrecv;
            analysis::CallShape shape;
            shape.bytes = static_cast<double>(count * 4 * (per_rank ? static_cast<size_t>(p) : 1));
            shape.count = static_cast<double>(count);
            shape.ranks = p;
            shape.nodes = per_node > 0 ? p / per_node : 1;
            CAPTURE(collective_name(kind));
            CAPTURE(algorithm_name(algo));
            CAPTURE(p);
            CAPTURE(per_node);
            CAPTURE(root);
            const auto terms = analysis::cost_terms(collective_name(kind), algorithm_name(algo), shape);
            REQUIRE(terms);
            const Counted got = count_call(kind, algo, p, count, per_node, root);
            if (kind == Collective::broadcast && algo == Algorithm::ring) {
              // One chunk here: the chain's p - 1 steps, of which a middle rank makes two.
              CHECK(terms->messages == doctest::Approx(p - 1));
              CHECK(got.exchanges == static_cast<uint64_t>(std::min(p - 1, 2)));
              CHECK(got.step_bytes == got.exchanges * count * 4);
              continue;
            }
            CHECK(terms->messages == doctest::Approx(static_cast<double>(got.exchanges)));
            CHECK(terms->bytes == doctest::Approx(static_cast<double>(got.step_bytes)).epsilon(0.002));
            CHECK(terms->reduced_bytes == doctest::Approx(static_cast<double>(got.reduced_bytes)).epsilon(0.002));
          }
        }
    }
  CHECK(pairs == 5 * 5 + 1 + 1 + 3 + 3);  // the five collectives x five algorithms, then the four patterns'
}

TEST_CASE("the pipelined ring broadcast: C chunks of about 1 MiB travel p - 2 + C steps") {
  const size_t count = size_t{4} << 18;  // 4 MiB of f32: 4 chunks
  for (int p : {3, 5}) {
    analysis::CallShape shape{static_cast<double>(count * 4), static_cast<double>(count), p, 1};
    const auto terms = analysis::cost_terms("broadcast", "ring", shape);
    REQUIRE(terms);
    CHECK(terms->messages == doctest::Approx(p - 2 + 4));
    CHECK(terms->bytes == doctest::Approx((p - 2 + 4) * count));  // steps of count * 4 / 4 bytes
    const Counted got = count_call(Collective::broadcast, Algorithm::ring, p, count);
    CHECK(got.exchanges == 4 + 1);  // a middle rank: receive chunk 0, then receive and forward, then forward
    CHECK(got.step_bytes == 5 * count);
  }
}

TEST_CASE("cost terms: one rank moves nothing; unknown pairs have none") {
  analysis::CallShape one{4096, 1024, 1, 1};
  const auto t = analysis::cost_terms("all_reduce", "ring", one);
  REQUIRE(t);
  CHECK(t->seconds(1, 1, 1) == 0);
  analysis::CallShape two{4096, 1024, 2, 1};
  CHECK_FALSE(analysis::cost_terms("all_reduce", "mpi", two));
  CHECK_FALSE(analysis::cost_terms("sendrecv", "tree", two));
  CHECK(analysis::cost_terms("sendrecv", "ring", two)->seconds(2e-6, 1e-9, 5e-10) == doctest::Approx(2e-6 + 4096e-9));
  CHECK(analysis::reduces("reduce_scatter"));
  CHECK_FALSE(analysis::reduces("all_gather"));
}
