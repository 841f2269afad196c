// nccl-tests' four patterns on the threads backend: sendrecv, all_to_all, gather and scatter x
// every algorithm that applies x k = 1..8 x every root x sizes {0, 1, k+1, 1031, 1<<14}, in and
// out of place, element for element against every rank's distinct input; plus the algorithms
// that do not apply, refused before any communication.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <chrono>
#include <thread>

#include "core/error.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "test_collective_util.hpp"

using namespace dpx;
using namespace dpx::parallel;
using namespace dpx::testing;

namespace {

constexpr float kSentinel = -7.0f;  // never an input: every value is >= 1
constexpr Collective kPatterns[] = {Collective::sendrecv, Collective::all_to_all, Collective::gather,
                                    Collective::scatter};

struct Case {
  Collective kind;
  Algorithm algo;
  size_t count;  // per block (all_to_all, gather, scatter) or the whole buffer (sendrecv)
  bool in_place;
  int root;
};

std::string where(const Case& c, int k, int r) {
  return detail::concat(collective_name(c.kind), " ", algorithm_name(c.algo), " k=", k, " count=", c.count,
                        c.in_place ? " in-place" : " out-of-place", " root=", c.root, " rank ", r);
}

// Rank q's input, element i (distinct across ranks and positions; see test_collective_util.hpp).
float input(int q, size_t i, int k) { return static_cast<float>(value(q, i, k, 1 << 20)); }

// Runs one case on this rank; returns "" or what went wrong first.
std::string run_case(Communicator& comm, const Case& c) {
  const int k = comm.size(), r = comm.rank(), left = (r - 1 + k) % k;
  const size_t n = c.count, whole = n * static_cast<size_t>(k);
  const bool root = r == c.root;
  size_t n_send = n, n_recv = n;
  if (c.kind == Collective::all_to_all) n_send = n_recv = whole;
  if (c.kind == Collective::gather) n_recv = whole;
  if (c.kind == Collective::scatter) n_send = whole;
  // One guard element past the end of each buffer catches overruns.
  std::vector<float> a(n_send + 1, kSentinel), b(std::max(n_send, n_recv) + 1, kSentinel);
  float *send = a.data(), *recv = b.data();
  if (c.in_place) {  // nccl-tests' offsets
    send = b.data();
    if (c.kind == Collective::gather) send = b.data() + r * n;
    if (c.kind == Collective::scatter) recv = b.data() + r * n;
  }
  // This rank's input; a scatter's only on the root (elsewhere send stays sentinels, and unread).
  const bool has_input = c.kind != Collective::scatter || root;
  if (has_input)
    for (size_t i = 0; i < n_send; ++i) send[i] = input(r, i, k);
  const std::vector<float> sent(send, send + n_send);

  switch (c.kind) {
    case Collective::sendrecv: comm.sendrecv(send, recv, n, DType::f32, c.algo); break;
    case Collective::all_to_all: comm.all_to_all(send, recv, n, DType::f32, c.algo); break;
    case Collective::gather: comm.gather(send, recv, n, DType::f32, c.root, c.algo); break;
    case Collective::scatter: comm.scatter(send, recv, n, DType::f32, c.root, c.algo); break;
    default: return "not a pattern";
  }

  if (a.back() != kSentinel || b.back() != kSentinel) return "wrote past the end of a buffer";
  // Out of place the input survives.
  if (!c.in_place && !std::equal(send, send + n_send, sent.begin())) return "modified the send buffer";
  // In place off a scatter's root, nothing but block r of the (unread) send buffer is written.
  if (c.in_place && c.kind == Collective::scatter && !root)
    for (size_t i = 0; i < whole; ++i)
      if (i / n != static_cast<size_t>(r) && b[i] != kSentinel) return detail::concat("wrote element ", i, " of send");
  // expected(i): element i of recv on this rank.
  auto expected = [&](size_t i) -> float {
    switch (c.kind) {
      case Collective::sendrecv: return input(left, i, k);
      case Collective::all_to_all: return input(static_cast<int>(i / n), r * n + i % n, k);  // block q from rank q
      case Collective::gather:
        if (root) return input(static_cast<int>(i / n), i % n, k);
        // Not the root: recv is not written (in place it holds this rank's input at block r).
        return c.in_place && i / n == static_cast<size_t>(r) ? input(r, i % n, k) : kSentinel;
      case Collective::scatter: return input(c.root, r * n + i, k);
      default: return 0;
    }
  };
  for (size_t i = 0; i < n_recv; ++i)
    if (recv[i] != expected(i)) return detail::concat("element ", i, " is ", recv[i], ", expected ", expected(i));
  return "";
}

}  // namespace

TEST_CASE("sendrecv, all_to_all, gather and scatter match their closed forms for every algorithm that applies, "
          "k = 1..8, every root, in and out of place") {
  Watchdog dog(60, "the patterns grid");
  int algorithms_run = 0;
  for (Collective kind : kPatterns) {
    for (Algorithm algo : kAlgorithms) {
      if (!algorithm_applies(algo, kind)) continue;
      ++algorithms_run;
      for (int k = 1; k <= 8; ++k) {
        std::vector<std::string> errors(static_cast<size_t>(k));
        int cases = 0;
        run_ranks(k, [&](Communicator& comm) {
          const int r = comm.rank();
          int mine = 0;
          for (int root = 0; root < k; ++root) {
            if (root != 0 && root != k / 2 && root != k - 1) continue;  // the first, the middle and the last
            for (size_t count : {size_t{0}, size_t{1}, size_t(k + 1), size_t{1031}, size_t{1} << 14}) {
              for (bool in_place : {false, true}) {
                const Case c{kind, algo, count, in_place, root};
                std::string e = run_case(comm, c);
                ++mine;
                if (!e.empty() && errors[static_cast<size_t>(r)].empty())
                  errors[static_cast<size_t>(r)] = where(c, k, r) + ": " + e;
              }
            }
          }
          if (r == 0) cases = mine;
        });
        const int roots = k == 1 ? 1 : k == 2 ? 2 : 3;
        CHECK(cases == roots * 5 * 2);
        for (const std::string& e : errors) CHECK_MESSAGE(e.empty(), e);
      }
    }
  }
  CHECK(algorithms_run == 8);  // sendrecv: ring; all_to_all: ring; gather, scatter: tree, naive, rhd
}

TEST_CASE("an algorithm without a schedule for a pattern is refused on every rank, naming the ones that apply") {
  Watchdog dog(10, "inapplicable algorithms");
  CHECK(algorithm_applies(Algorithm::ring, Collective::sendrecv));
  CHECK_FALSE(algorithm_applies(Algorithm::tree, Collective::sendrecv));
  CHECK(algorithm_applies(Algorithm::ring, Collective::all_to_all));
  CHECK_FALSE(algorithm_applies(Algorithm::hier, Collective::all_to_all));
  for (Collective c : {Collective::gather, Collective::scatter}) {
    CHECK_FALSE(algorithm_applies(Algorithm::ring, c));
    CHECK_FALSE(algorithm_applies(Algorithm::hier, c));
    CHECK(algorithm_applies(Algorithm::mpi, c));
    CHECK(algorithm_for(c, Algorithm::ring) == Algorithm::tree);  // a communicator's ring default
    CHECK(algorithm_for(c, Algorithm::rhd) == Algorithm::rhd);
  }
  for (Collective c : {Collective::all_reduce, Collective::broadcast, Collective::reduce, Collective::all_gather,
                       Collective::reduce_scatter})
    for (Algorithm a : kAlgorithms) CHECK(algorithm_applies(a, c));
  CHECK_FALSE(algorithm_applies(Algorithm::mpi, Collective::barrier));
  run_ranks(3, [](Communicator& comm) {
    std::vector<float> x(6, 1.f), y(6);
    CHECK_THROWS_WITH_AS(comm.gather(x.data(), y.data(), 2, DType::f32, 0, Algorithm::ring),
                         doctest::Contains("gather: the ring algorithm has no schedule for it; use tree, naive"),
                         Error);
    CHECK_THROWS_WITH_AS(comm.sendrecv(x.data(), y.data(), 2, DType::f32, Algorithm::hier),
                         doctest::Contains("sendrecv: the hier algorithm has no schedule for it; use ring"), Error);
    CHECK(comm.calls_made() == 0);  // refused before the call was numbered
    comm.gather(x.data(), comm.rank() == 1 ? y.data() : nullptr, 2, DType::f32, 1);  // the ring default: tree
    CHECK(comm.calls_made() == 1);
  });
}

TEST_CASE("the Tensor overloads of the patterns check their sizes and move the blocks") {
  Watchdog dog(10, "tensor patterns");
  run_ranks(3, [](Communicator& comm) {
    const int r = comm.rank();
    const float me = static_cast<float>(r);
    Tensor mine = Tensor::from({2}, {me, me + 10});
    Tensor got = Tensor::zeros({2});
    comm.sendrecv(mine, got);
    const float left = static_cast<float>((r + 2) % 3);
    CHECK(got.to_vector() == std::vector<float>{left, left + 10});
    comm.sendrecv(mine, mine);  // in place
    CHECK(mine.to_vector() == std::vector<float>{left, left + 10});

    Tensor blocks = Tensor::from({3}, {me * 10, me * 10 + 1, me * 10 + 2});  // block q (one element) for rank q
    Tensor swapped = Tensor::zeros({3});
    comm.all_to_all(blocks, swapped);
    CHECK(swapped.to_vector() == std::vector<float>{me, 10 + me, 20 + me});

    Tensor all = Tensor::zeros({6});
    comm.gather(Tensor::from({2}, {me, me}), r == 2 ? all : Tensor(), 2);
    if (r == 2) CHECK(all.to_vector() == std::vector<float>{0, 0, 1, 1, 2, 2});
    Tensor part = Tensor::zeros({2});
    comm.scatter(r == 2 ? all : Tensor(), part, 2, Algorithm::rhd);
    CHECK(part.to_vector() == std::vector<float>{me, me});

    CHECK_THROWS_WITH_AS(comm.all_to_all(Tensor::zeros({4}), Tensor::zeros({4})),
                         doctest::Contains("all_to_all: 4 elements are not 3 blocks"), Error);
    if (r == 0)
      CHECK_THROWS_WITH_AS(comm.gather(part, Tensor::zeros({5}), 0), doctest::Contains("gather: 5 elements where 6"),
                           Error);
    CHECK_THROWS_WITH_AS(comm.scatter(all, part, 3), doctest::Contains("root 3 is not a rank"), Error);
  });
}

TEST_CASE("a rank late for a gather is reported with the pattern, its algorithm, root and gathered size") {
  Watchdog dog(20, "pattern stall");
  RankOptions ro;
  ro.timeout_s = 0.3;
  std::string report;
  try {
    run_ranks(3, [](Communicator& comm) {
      std::vector<float> x(2, 1.f), all(6);
      if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      comm.gather(x.data(), all.data(), 2, DType::f32, 2, Algorithm::naive);
    }, ro);
  } catch (const Error& e) {
    report = e.what();
  }
  CAPTURE(report);
  CHECK(report.find("in gather #1 (24 B of f32, naive, root 2)") != std::string::npos);
  CHECK(report.find("rank 0: busy outside communication") != std::string::npos);
}
