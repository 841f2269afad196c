// Collectives over MPI (run under mpirun -np 2, 3 and 4): every collective (nccl-tests' patterns
// included) x every dpx algorithm that applies
// (hier on one node, one node per rank, and nodes of two) x sizes, in and out of place, against
// the closed forms, and bitwise equal to the threads backend on the same inputs; every dtype and
// op, for dpx's algorithms and the library's own (--algo mpi); sub-communicators.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_test_group.hpp"
#include "parallel/bench/collective_check.hpp"
#include "parallel/comm/threads/threads_backend.hpp"

using namespace dpx;
using namespace dpx::parallel;
using testing::mpi_group;

namespace {

constexpr Collective kCollectives[] = {Collective::all_reduce, Collective::broadcast,  Collective::reduce,
                                       Collective::all_gather, Collective::reduce_scatter, Collective::sendrecv,
                                       Collective::all_to_all, Collective::gather,     Collective::scatter};

bool reduces(Collective c) { return c == Collective::all_reduce || c == Collective::reduce || c == Collective::reduce_scatter; }

struct Case {
  Collective kind;
  DType dtype;
  ReduceOp op;
  size_t count;
  bool in_place;
  int root;
};

// Every case of the grid for k ranks: sizes 0, 1, k-1, k+1, 1031 and 1<<14, in and out of place.
std::vector<Case> grid(int k, const std::vector<DType>& dtypes, const std::vector<ReduceOp>& ops) {
  std::vector<Case> cases;
  for (Collective kind : kCollectives)
    for (DType dtype : dtypes)
      for (ReduceOp op : ops) {
        if (!reduces(kind) && op != ReduceOp::sum) continue;
        for (size_t count : {size_t{0}, size_t{1}, size_t(k - 1), size_t(k + 1), size_t{1031}, size_t{1} << 14})
          for (bool in_place : {false, true}) cases.push_back({kind, dtype, op, count, in_place, in_place ? k / 2 : k - 1});
      }
  return cases;
}

std::string where(const Case& c, Algorithm algo, int rank) {
  return detail::concat(collective_name(c.kind), " ", algorithm_name(algo), " ", dtype_name(c.dtype), " ",
                        reduce_op_name(c.op), " count=", c.count, c.in_place ? " in-place" : " out-of-place", " root=",
                        c.root, " rank ", rank);
}

// Runs one case on this rank with the benchmark's data (collective_check.hpp); returns the bytes
// of its result, and "" or what is wrong with them.
std::string run_case(Communicator& comm, const Case& c, Algorithm algo, std::vector<std::byte>& result) {
  const int k = comm.size(), r = comm.rank();
  const size_t es = dtype_size(c.dtype), n = c.count;
  const bool send_whole = c.kind == Collective::reduce_scatter || c.kind == Collective::scatter ||
                          c.kind == Collective::all_to_all;
  const bool recv_whole = c.kind == Collective::all_gather || c.kind == Collective::gather ||
                          c.kind == Collective::all_to_all;
  const size_t n_send = send_whole ? n * k : n, n_recv = recv_whole ? n * k : n;
  std::vector<std::byte> a((n_send + 1) * es, std::byte{0x5a}), b((std::max(n_send, n_recv) + 1) * es, std::byte{0x5a});
  std::byte *send = a.data(), *recv = b.data();
  if (c.in_place) {
    send = b.data();
    if (c.kind == Collective::all_gather || c.kind == Collective::gather) send = b.data() + r * n * es;
    if (c.kind == Collective::reduce_scatter || c.kind == Collective::scatter) recv = b.data() + r * n * es;
  }
  const ReduceOp data_op = reduces(c.kind) ? c.op : ReduceOp::sum;
  // sendrecv and gather number their elements across ranks, so a block in the wrong place shows.
  auto first = [&](int q) { return c.kind == Collective::sendrecv || c.kind == Collective::gather ? q * n : 0; };
  if ((c.kind != Collective::broadcast && c.kind != Collective::scatter) || r == c.root)
    fill_input(send, n_send, first(r), c.dtype, data_op, r);
  switch (c.kind) {
    case Collective::all_reduce: comm.all_reduce(send, recv, n, c.dtype, c.op, algo); break;
    case Collective::broadcast: comm.broadcast(send, recv, n, c.dtype, c.root, algo); break;
    case Collective::reduce: comm.reduce(send, recv, n, c.dtype, c.op, c.root, algo); break;
    case Collective::all_gather: comm.all_gather(send, recv, n, c.dtype, algo); break;
    case Collective::reduce_scatter: comm.reduce_scatter(send, recv, n, c.dtype, c.op, algo); break;
    case Collective::sendrecv: comm.sendrecv(send, recv, n, c.dtype, algo); break;
    case Collective::all_to_all: comm.all_to_all(send, recv, n, c.dtype, algo); break;
    case Collective::gather: comm.gather(send, recv, n, c.dtype, c.root, algo); break;
    case Collective::scatter: comm.scatter(send, recv, n, c.dtype, c.root, algo); break;
    default: return "not a collective";
  }
  const bool has_result = (c.kind != Collective::reduce && c.kind != Collective::gather) || r == c.root;
  result.assign(recv, recv + (has_result ? n_recv * es : 0));
  if (a.back() != std::byte{0x5a} || b.back() != std::byte{0x5a}) return "wrote past the end of a buffer";
  int64_t wrong = 0;
  switch (c.kind) {
    case Collective::all_reduce: wrong = count_wrong_reduced(recv, n, 0, c.dtype, c.op, k); break;
    case Collective::reduce: wrong = r == c.root ? count_wrong_reduced(recv, n, 0, c.dtype, c.op, k) : 0; break;
    case Collective::broadcast: wrong = count_wrong_input(recv, n, 0, c.dtype, data_op, c.root); break;
    case Collective::reduce_scatter: wrong = count_wrong_reduced(recv, n, r * n, c.dtype, c.op, k); break;
    case Collective::all_gather:
      for (int q = 0; q < k; ++q) wrong += count_wrong_input(recv + q * n * es, n, 0, c.dtype, data_op, q);
      break;
    case Collective::sendrecv: {
      const int left = (r - 1 + k) % k;
      wrong = count_wrong_input(recv, n, first(left), c.dtype, data_op, left);
      break;
    }
    case Collective::all_to_all:  // block q: block r of rank q's input
      for (int q = 0; q < k; ++q) wrong += count_wrong_input(recv + q * n * es, n, r * n, c.dtype, data_op, q);
      break;
    case Collective::gather:
      if (r == c.root)
        for (int q = 0; q < k; ++q) wrong += count_wrong_input(recv + q * n * es, n, first(q), c.dtype, data_op, q);
      break;
    case Collective::scatter: wrong = count_wrong_input(recv, n, r * n, c.dtype, data_op, c.root); break;
    default: break;
  }
  return wrong == 0 ? "" : detail::concat(wrong, " wrong elements");
}

// Runs every case over MPI with `algo` (nodes as `layout` says, empty: the real ones) and, for
// dpx's algorithms, on k thread ranks in this process with the same layout: this rank's results
// must be the same bytes. Returns the first problem, or "".
std::string check_grid(Algorithm algo, const std::vector<Case>& cases, const std::vector<int>& layout) {
  Communicator& world = mpi_group->world();
  const int k = world.size(), me = world.rank();
  std::vector<std::vector<std::byte>> mine(cases.size());
  if (algo != Algorithm::mpi) {
    run_ranks(k, [&](Communicator& comm) {
      if (!layout.empty()) comm.set_node_layout(layout);
      std::vector<std::byte> out;
      for (size_t i = 0; i < cases.size(); ++i) {
        if (!algorithm_applies(algo, cases[i].kind)) continue;
        run_case(comm, cases[i], algo, out);
        if (comm.rank() == me) mine[i] = out;
      }
    });
  }
  const std::vector<int> real = [&] {
    std::vector<int> nodes;
    for (int q = 0; q < k; ++q) nodes.push_back(world.node_of(q));
    return nodes;
  }();
  world.set_node_layout(layout.empty() ? real : layout);
  std::string problem;
  std::vector<std::byte> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!algorithm_applies(algo, cases[i].kind)) continue;  // the patterns: only the algorithms that fit them
    std::string e = run_case(world, cases[i], algo, out);
    if (e.empty() && algo != Algorithm::mpi && out != mine[i]) e = "differs from the threads backend's result";
    if (!e.empty() && problem.empty()) problem = where(cases[i], algo, me) + ": " + e;
  }
  world.set_node_layout(real);
  return problem;
}

std::vector<int> nodes_of(int k, int ranks_per_node) {
  std::vector<int> nodes;
  for (int r = 0; r < k; ++r) nodes.push_back(r / ranks_per_node);
  return nodes;
}

}  // namespace

TEST_CASE("every collective x every dpx algorithm over MPI: closed forms, and the threads backend's bits") {
  const int k = mpi_group->size();
  const auto cases = grid(k, {DType::f32}, {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min});
  for (Algorithm algo : {Algorithm::ring, Algorithm::tree, Algorithm::naive, Algorithm::rhd}) {
    const std::string problem = check_grid(algo, cases, {});
    CHECK_MESSAGE(problem.empty(), problem);
  }
  for (int per_node : {k, 1, 2}) {  // hier: one node, one node per rank, nodes of two
    const std::string problem = check_grid(Algorithm::hier, cases, nodes_of(k, per_node));
    CHECK_MESSAGE(problem.empty(), problem, " (nodes of ", per_node, ")");
  }
}

TEST_CASE("every dtype and op, with dpx's algorithms and the library's own (--algo mpi)") {
  const int k = mpi_group->size();
  const auto cases = grid(k, {DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8},
                          {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min, ReduceOp::avg});
  for (Algorithm algo : {Algorithm::ring, Algorithm::rhd, Algorithm::hier, Algorithm::mpi}) {
    const std::string problem = check_grid(algo, cases, {});
    CHECK_MESSAGE(problem.empty(), problem);
  }
  const auto f32 = grid(k, {DType::f32}, {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min});
  const std::string problem = check_grid(Algorithm::mpi, f32, {});
  CHECK_MESSAGE(problem.empty(), problem);
}

TEST_CASE("a communicator of the first k ranks for every k; the others get none") {
  const int n = mpi_group->size(), me = mpi_group->rank();
  for (int k = 1; k <= n; ++k) {
    std::unique_ptr<Communicator> part = mpi_group->first(k);
    CHECK((part != nullptr) == (me < k));
    if (!part) continue;
    CHECK(part->size() == k);
    CHECK(part->rank() == me);
    for (Algorithm algo : {Algorithm::ring, Algorithm::hier, Algorithm::mpi}) {
      int64_t x = me + 1, sum = 0;
      part->all_reduce(&x, &sum, 1, DType::i64, ReduceOp::sum, algo);
      CHECK(sum == k * (k + 1) / 2);
    }
  }
  CHECK_THROWS_AS(mpi_group->first(n + 1), Error);
}

TEST_CASE("over MPI the reductions are the threads backend's, bit for bit, on data where the order of summation shows") {
  Communicator& world = mpi_group->world();
  const int k = world.size(), me = world.rank();
  const size_t n = 10007;
  // Values of very different magnitudes: every order of summation rounds differently.
  auto input = [&](int rank) {
    std::vector<float> v(n);
    uint32_t state = 2654435761u * static_cast<uint32_t>(rank + 1);
    for (size_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      const float unit = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
      v[i] = unit * std::ldexp(1.0f, static_cast<int>(state % 24) - 12);
    }
    return v;
  };
  std::vector<std::vector<float>> threads_result(kAlgorithms.size()), mpi_result(kAlgorithms.size());
  run_ranks(k, [&](Communicator& comm) {
    for (size_t a = 0; a < kAlgorithms.size(); ++a) {
      std::vector<float> v = input(comm.rank());
      comm.all_reduce(v.data(), v.data(), n, DType::f32, ReduceOp::sum, kAlgorithms[a]);
      if (comm.rank() == me) threads_result[a] = v;
    }
  });
  for (size_t a = 0; a < kAlgorithms.size(); ++a) {
    std::vector<float> v = input(me);
    world.all_reduce(v.data(), v.data(), n, DType::f32, ReduceOp::sum, kAlgorithms[a]);
    mpi_result[a] = v;
    CHECK_MESSAGE(std::memcmp(v.data(), threads_result[a].data(), n * sizeof(float)) == 0,
                  algorithm_name(kAlgorithms[a]), " over MPI differs from the threads backend");
  }
  if (k >= 3)  // with two ranks a + b == b + a: only three or more ranks can tell the orders apart
    CHECK_MESSAGE(std::memcmp(mpi_result[0].data(), mpi_result[1].data(), n * sizeof(float)) != 0,
                  "ring and tree summed in the same order: the data cannot show a difference");
}
