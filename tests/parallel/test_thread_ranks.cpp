// The contract the p2p backend relies on, checked on the CPU: every schedule of every algorithm
// touches a rank's memory only through its transport (exchanges, copy_local, average_local and the
// transport's scratch), never through a host memcpy, a host division or the communicator's host
// Workspace, which on a GPU would read device pointers on the host. A "fenced" transport of thread
// ranks (thread_ranks.hpp) accepts only pointers inside the buffers the test registered and the
// scratch it handed out itself, and must give the threads backend's results bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/error.hpp"
#include "parallel/comm/threads/thread_ranks.hpp"

using namespace dpx;
using namespace dpx::parallel;

namespace {

class FencedTransport final : public ThreadRankTransport {
 public:
  using ThreadRankTransport::ThreadRankTransport;
  std::string_view name() const override { return "fenced"; }
  bool accepts(Device device) const override { return device.is_cpu(); }

  // The rank's own buffers for the next calls (the test's send and recv).
  void allow(const void* p, size_t bytes) { regions_.push_back({static_cast<const std::byte*>(p), bytes}); }
  int local_copies = 0, local_averages = 0, scratch_calls = 0;

  void copy_local(void* dst, const void* src, size_t bytes) override {
    ++local_copies;
    check(dst, bytes, "copy_local's dst");
    check(src, bytes, "copy_local's src");
    Transport::copy_local(dst, src, bytes);
  }
  void average_local(void* data, size_t count, DType dtype, int ranks) override {
    ++local_averages;
    check(data, count * dtype_size(dtype), "average_local's data");
    Transport::average_local(data, count, dtype, ranks);
  }
  std::byte* scratch(size_t bytes, int slot) override {
    ++scratch_calls;
    auto& s = scratch_[static_cast<size_t>(slot)];
    if (s.size() < bytes) s.assign(bytes, std::byte{0});
    return s.data();
  }

 protected:
  const void* before_send(const Exchange& x) override {
    check(x.send, x.send_bytes, "a send");
    return nullptr;
  }
  void deliver(const Exchange& x, const void* incoming, const void*) override {
    check(x.recv, x.recv_bytes, "a receive");
    if (x.reduce_with) {
      check(x.reduce_with, x.recv_bytes, "reduce_with");
      reduce_into(x.recv, x.reduce_with, incoming, x.recv_bytes / dtype_size(x.dtype), x.dtype, x.op);
    } else if (x.recv_bytes > 0) {
      std::memcpy(x.recv, incoming, x.recv_bytes);
    }
  }

 private:
  struct Region {
    const std::byte* p;
    size_t bytes;
  };
  void check(const void* p, size_t bytes, const char* what) const {
    if (bytes == 0) return;
    const auto* b = static_cast<const std::byte*>(p);
    auto inside = [&](const std::byte* lo, size_t n) { return b >= lo && b + bytes <= lo + n; };
    for (const Region& r : regions_)
      if (inside(r.p, r.bytes)) return;
    for (const auto& s : scratch_)
      if (!s.empty() && inside(s.data(), s.size())) return;
    fail(what, " of ", bytes, " bytes outside the rank's buffers and its transport's scratch");
  }
  std::vector<Region> regions_;
  std::vector<std::byte> scratch_[2];
};

// Rank r's input element i: small integers and halves, exact in f32 sums.
float value(int r, size_t i) { return static_cast<float>(static_cast<int>((i * 7 + r * 13) % 23) - 11) * 0.5f; }

// Every collective of `algo` on k ranks with `make`'s transports; each rank's outputs, in order.
template <typename Run>
std::vector<std::vector<float>> run_all(int k, Algorithm algo, Run run) {
  std::vector<std::vector<float>> out(static_cast<size_t>(k));
  const size_t n = 1031, block = 97;
  run([&](Communicator& comm, FencedTransport* fenced) {
    const int r = comm.rank();
    std::vector<float> a(n * static_cast<size_t>(k)), b(n * static_cast<size_t>(k)), c(n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = value(r, i);
    std::copy(a.begin(), a.begin() + static_cast<long>(n), c.begin());
    if (fenced)
      for (const auto* v : {&a, &b, &c}) fenced->allow(v->data(), v->size() * 4);
    std::vector<float>& mine = out[static_cast<size_t>(r)];
    auto keep = [&](const float* p, size_t count) { mine.insert(mine.end(), p, p + count); };
    auto when = [&](Collective c) { return algorithm_applies(algo, c); };
    if (when(Collective::all_reduce)) {
      comm.all_reduce(a.data(), b.data(), n, DType::f32, ReduceOp::avg, algo);
      keep(b.data(), n);
      comm.all_reduce(c.data(), c.data(), n, DType::f32, ReduceOp::sum, algo);  // in place
      keep(c.data(), n);
    }
    if (when(Collective::broadcast)) comm.broadcast(a.data(), b.data(), n, DType::f32, k - 1, algo), keep(b.data(), n);
    if (when(Collective::reduce)) {
      comm.reduce(a.data(), b.data(), n, DType::f32, ReduceOp::max, 1 % k, algo);
      if (r == 1 % k) keep(b.data(), n);
    }
    if (when(Collective::all_gather))
      comm.all_gather(a.data(), b.data(), block, DType::f32, algo), keep(b.data(), block * static_cast<size_t>(k));
    if (when(Collective::reduce_scatter))
      comm.reduce_scatter(a.data(), b.data(), block, DType::f32, ReduceOp::sum, algo), keep(b.data(), block);
    if (when(Collective::sendrecv)) comm.sendrecv(a.data(), b.data(), n, DType::f32, algo), keep(b.data(), n);
    if (when(Collective::all_to_all))
      comm.all_to_all(a.data(), b.data(), block, DType::f32, algo), keep(b.data(), block * static_cast<size_t>(k));
    if (when(Collective::gather)) {
      comm.gather(a.data(), b.data(), block, DType::f32, k - 1, algo);
      if (r == k - 1) keep(b.data(), block * static_cast<size_t>(k));
    }
    if (when(Collective::scatter)) comm.scatter(a.data(), b.data(), block, DType::f32, 0, algo), keep(b.data(), block);
    comm.barrier();
  });
  return out;
}

}  // namespace

TEST_CASE("every algorithm reaches a rank's memory only through its transport, as the p2p backend needs") {
  for (int k : {1, 2, 3, 5}) {
    for (Algorithm algo : kAlgorithms) {
      CAPTURE(k);
      CAPTURE(algorithm_name(algo));
      RankOptions ro;
      ro.ranks_per_node = algo == Algorithm::hier ? 2 : 0;
      const auto want = run_all(k, algo, [&](auto body) {
        run_ranks(k, [&](Communicator& comm) { body(comm, nullptr); }, ro);
      });
      std::vector<FencedTransport*> fenced(static_cast<size_t>(k), nullptr);
      std::mutex m;
      int copies = 0, scratches = 0, averages = 0;
      const auto got = run_all(k, algo, [&](auto body) {
        run_thread_ranks(
            k,
            [&](Communicator&, Communicator& comm) {
              FencedTransport* t = fenced[static_cast<size_t>(comm.rank())];
              body(comm, t);
              std::lock_guard<std::mutex> lock(m);
              copies += t->local_copies, scratches += t->scratch_calls, averages += t->local_averages;
            },
            ro,
            [&](ThreadWorld& world, int rank) -> std::unique_ptr<ThreadRankTransport> {
              auto t = std::make_unique<FencedTransport>(world, rank);
              fenced[static_cast<size_t>(rank)] = t.get();
              return t;
            },
            "fenced");
      });
      CHECK(got == want);
      if (k > 1) CHECK(averages > 0);  // avg's division went through the transport
      if (k == 1) CHECK(copies > 0);  // one rank: every collective is a local copy
    }
  }
}
