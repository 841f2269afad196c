// Every collective x every algorithm x k in {1, 2, 3, 4, 5, 7, 8} x sizes {0, 1, k-1, k+1, 1031,
// kLarge}, out of place and in place, with sum/avg/max/min, against closed-form f32 results
// (integer-valued data, so every order of summation is exact and the expected value is unique).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "parallel/comm/threads/threads_backend.hpp"
#include "test_collective_util.hpp"

using namespace dpx;
using namespace dpx::parallel;
using namespace dpx::testing;

namespace {

constexpr float kSentinel = -7.0f;  // never a valid result: every value is >= 1

// The large size: 1 MiB of floats, the ring's pipeline chunk. Under the sanitizers a quarter of
// it (the same code paths: one chunk either way), whose instrumented copies and reductions made
// this file CI's slowest sanitized test (110 s of 2 cores).
#if defined(DPX_SANITIZE)
constexpr size_t kLarge = size_t{1} << 16;
#else
constexpr size_t kLarge = size_t{1} << 18;
#endif

struct Case {
  Collective kind;
  ReduceOp op;
  size_t count;
  bool in_place;
  int root;
};

// The closed forms for one k, tabulated once and shared read-only by the ranks.
struct Tables {
  Tables(int k, size_t limit) : input(static_cast<size_t>(k)) {
    for (int r = 0; r < k; ++r) {
      input[r].resize(limit);
      for (size_t i = 0; i < limit; ++i) input[r][i] = static_cast<float>(value(r, i, k));
    }
    for (auto& e : expected) e.resize(limit);
    for (size_t i = 0; i < limit; ++i) {
      expected[0][i] = static_cast<float>(expected_sum(i, k));
      expected[1][i] = static_cast<float>(expected_sum(i, k)) / static_cast<float>(k);  // as finish_average
      expected[2][i] = static_cast<float>(expected_max(i, k));
      expected[3][i] = static_cast<float>(expected_min(i, k));
    }
  }
  const std::vector<float>& reduced(ReduceOp op) const {
    return expected[op == ReduceOp::sum ? 0 : op == ReduceOp::avg ? 1 : op == ReduceOp::max ? 2 : 3];
  }
  std::vector<std::vector<float>> input;  // [rank][element]
  std::array<std::vector<float>, 4> expected;  // sum, avg, max, min
};

std::string where(const Case& c, Algorithm algo, int k, int r) {
  return detail::concat(collective_name(c.kind), " ", algorithm_name(algo), " ", reduce_op_name(c.op), " k=", k,
                        " count=", c.count, c.in_place ? " in-place" : " out-of-place", " root=", c.root, " rank ", r);
}

// Runs one case on this rank; returns "" or what went wrong first.
std::string run_case(Communicator& comm, const Tables& t, const Case& c, Algorithm algo) {
  const int k = comm.size(), r = comm.rank();
  const size_t n = c.count;
  const size_t n_send = c.kind == Collective::reduce_scatter ? n * k : n;
  const size_t n_recv = c.kind == Collective::all_gather ? n * k : n;
  // One guard element past the end of each buffer catches overruns.
  std::vector<float> a(n_send + 1, kSentinel), b(std::max(n_send, n_recv) + 1, kSentinel);
  float *send = a.data(), *recv = b.data();
  if (c.in_place) {
    send = b.data();
    if (c.kind == Collective::all_gather) send = b.data() + r * n;
    if (c.kind == Collective::reduce_scatter) recv = b.data() + r * n;
  }
  const std::vector<float>& mine = t.input[static_cast<size_t>(r)];
  std::copy(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(n_send), send);

  switch (c.kind) {
    case Collective::all_reduce: comm.all_reduce(send, recv, n, DType::f32, c.op, algo); break;
    case Collective::broadcast: comm.broadcast(send, recv, n, DType::f32, c.root, algo); break;
    case Collective::reduce: comm.reduce(send, recv, n, DType::f32, c.op, c.root, algo); break;
    case Collective::all_gather: comm.all_gather(send, recv, n, DType::f32, algo); break;
    case Collective::reduce_scatter: comm.reduce_scatter(send, recv, n, DType::f32, c.op, algo); break;
    default: return "not a collective";
  }

  if (a.back() != kSentinel || b.back() != kSentinel) return "wrote past the end of a buffer";
  // The input must survive out of place, and off the root of a reduce even in place.
  const bool input_kept = !c.in_place || (c.kind == Collective::reduce && r != c.root);
  if (input_kept && !std::equal(send, send + n_send, mine.begin())) return "modified the send buffer";
  // expected(i): element i of the result on this rank; null where the result is undefined.
  const float* expected = nullptr;
  switch (c.kind) {
    case Collective::all_reduce: expected = t.reduced(c.op).data(); break;
    case Collective::reduce: expected = r == c.root ? t.reduced(c.op).data() : nullptr; break;
    case Collective::broadcast: expected = t.input[static_cast<size_t>(c.root)].data(); break;
    case Collective::reduce_scatter: expected = t.reduced(c.op).data() + r * n; break;
    case Collective::all_gather:
      for (size_t i = 0; i < n_recv; ++i)
        if (recv[i] != t.input[i / n][i % n])
          return detail::concat("element ", i, " is ", recv[i], ", expected ", t.input[i / n][i % n]);
      return "";
    default: break;
  }
  if (expected)
    for (size_t i = 0; i < n_recv; ++i)
      if (recv[i] != expected[i]) return detail::concat("element ", i, " is ", recv[i], ", expected ", expected[i]);
  return "";
}

// The node of each of k ranks (hier groups ranks by node); empty: one node.
using Layout = std::vector<int> (*)(int k);

void check_algorithm(Algorithm algo, Layout layout = nullptr) {
  Watchdog dog(50, detail::concat("the ", algorithm_name(algo), " grid"));
  for (int k : {1, 2, 3, 4, 5, 7, 8}) {
    std::vector<std::string> errors(static_cast<size_t>(k));
    const Tables tables(k, size_t(k) * kLarge);
    int cases = 0;
    run_ranks(k, [&](Communicator& comm) {
      if (layout) comm.set_node_layout(layout(k));
      const int r = comm.rank();
      int mine = 0;
      for (Collective kind : {Collective::all_reduce, Collective::broadcast, Collective::reduce, Collective::all_gather,
                              Collective::reduce_scatter}) {
        const bool reduces = kind != Collective::broadcast && kind != Collective::all_gather;
        for (size_t count : {size_t{0}, size_t{1}, size_t(k - 1), size_t(k + 1), size_t{1031}, kLarge}) {
          for (bool in_place : {false, true}) {
            for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
              if (!reduces && op != ReduceOp::sum) continue;
              // Both a root in the middle and the last rank, so relative ranks are exercised.
              Case c{kind, op, count, in_place, in_place ? k / 2 : k - 1};
              std::string e = run_case(comm, tables, c, algo);
              ++mine;
              if (!e.empty() && errors[r].empty())
                errors[r] = where(c, algo, k, r) + (layout ? " (with a node layout)" : "") + ": " + e;
            }
          }
        }
      }
      if (r == 0) cases = mine;
    });
    CHECK(cases == 2 * 6 * (3 * 4 + 2));
    for (const std::string& e : errors) CHECK_MESSAGE(e.empty(), e);
  }
}

}  // namespace

TEST_CASE("every algorithm of the registry: every collective matches its closed form for k = 1..8, every size, in "
          "and out of place") {
  for (Algorithm algo : kAlgorithms) {  // algorithms.def's rows of dpx's own
    CAPTURE(algorithm_name(algo));
    check_algorithm(algo);  // hier: one node, a tree inside it
  }
}

TEST_CASE("hier: every collective matches its closed form on one node per rank, and on uneven nodes") {
  check_algorithm(Algorithm::hier, [](int k) { return std::vector<int>(static_cast<size_t>(k), 0); });
  check_algorithm(Algorithm::hier, [](int k) {  // every rank its own node: the leaders' ring only
    std::vector<int> nodes;
    for (int r = 0; r < k; ++r) nodes.push_back(r);
    return nodes;
  });
  check_algorithm(Algorithm::hier, [](int k) {  // nodes of 3 consecutive ranks, the last one short
    std::vector<int> nodes;
    for (int r = 0; r < k; ++r) nodes.push_back(r / 3);
    return nodes;
  });
  check_algorithm(Algorithm::hier, [](int k) {  // ranks dealt round-robin over 2 nodes (--map-by node), ids not 0..
    std::vector<int> nodes;
    for (int r = 0; r < k; ++r) nodes.push_back(100 - r % 2);
    return nodes;
  });
}
