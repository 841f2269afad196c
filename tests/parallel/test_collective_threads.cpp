// The threads backend and the Communicator API around the algorithms: run_ranks (errors, aborts,
// pinning, oversubscription), send/recv, barrier, Tensor overloads, byte and call counters,
// argument checks, and many calls in a row without a hang.
#include <doctest/doctest.h>
#include <sched.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/tensor.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "test_collective_util.hpp"

using namespace dpx;
using namespace dpx::parallel;
using namespace dpx::testing;

TEST_CASE("run_ranks gives each rank its id, the group size and the threads backend") {
  Watchdog dog(10, "rank ids");
  std::vector<int> seen(5, -1);
  run_ranks(5, [&](Communicator& comm) {
    CHECK(comm.size() == 5);
    CHECK(comm.backend() == "threads");
    seen[static_cast<size_t>(comm.rank())] = comm.rank();
  });
  for (int r = 0; r < 5; ++r) CHECK(seen[static_cast<size_t>(r)] == r);
  CHECK_THROWS_AS(run_ranks(0, [](Communicator&) {}), UsageError);
}

TEST_CASE("a rank that throws makes run_ranks rethrow it, and wakes the ranks waiting for it") {
  Watchdog dog(30, "abort");
  // Ten rounds: a woken rank frees its buffer while a peer may still be reading it (a race that
  // scripts/test --sanitize caught once in five rounds before the exchange's claim/withdraw).
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    std::mutex mu;
    std::vector<std::string> woken;
    try {
      run_ranks(8, [&](Communicator& comm) {
        std::vector<float> x(1000, 1.f);
        try {
          // Rank 3 may throw while others still finish this first call; the second cannot finish.
          comm.all_reduce(x.data(), x.data(), x.size(), DType::f32, ReduceOp::sum);
          if (comm.rank() == 3) throw std::runtime_error("boom on rank 3");
          comm.all_reduce(x.data(), x.data(), x.size(), DType::f32, ReduceOp::sum);
        } catch (const Error& e) {
          std::lock_guard<std::mutex> lock(mu);
          woken.push_back(e.what());
          throw;
        }
      });
      FAIL("run_ranks returned although rank 3 threw");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "boom on rank 3");  // the cause, not a woken rank's error
    }
    CHECK(woken.size() == 7);
    for (const auto& w : woken) CHECK(w == "rank 3 aborted: boom on rank 3");
  }
}

TEST_CASE("a rank that throws before any communication does not hang a barrier") {
  Watchdog dog(10, "abort before barrier");
  for (int k : {2, 7}) {
    CHECK_THROWS_WITH_AS(run_ranks(k, [&](Communicator& comm) {
      if (comm.rank() == k - 1) fail("bad input on the last rank");
      comm.barrier();
    }), "bad input on the last rank", Error);
  }
}

TEST_CASE("a rank that returns while another waits for it is an error, not a hang") {
  Watchdog dog(10, "mismatched ranks");
  CHECK_THROWS_WITH_AS(run_ranks(3, [](Communicator& comm) {
    int x = 0;
    if (comm.rank() == 1) comm.recv(&x, 1, DType::i32, 0);  // rank 0 never sends
  }), doctest::Contains("rank 0 returned from its rank function while rank 1 was waiting"), Error);
  CHECK_THROWS_WITH_AS(run_ranks(4, [](Communicator& comm) {
    if (comm.rank() != 2) comm.barrier();
  }), doctest::Contains("returned from its rank function"), Error);
}

TEST_CASE("ranks that wait for each other in a cycle are reported as a deadlock, not left hanging") {
  Watchdog dog(10, "deadlock");
  CHECK_THROWS_WITH_AS(run_ranks(2, [](Communicator& comm) {
    int x = 0;
    comm.recv(&x, 1, DType::i32, 1 - comm.rank());  // both receive first: neither ever sends
  }), doctest::Contains("deadlock: every running rank waits for another (rank 0 waits to receive from rank 1; "
                        "rank 1 waits to receive from rank 0)"), Error);
  // Collectives called in a different order on different ranks: a classic DDP bucket-order bug.
  CHECK_THROWS_WITH_AS(run_ranks(3, [](Communicator& comm) {
    std::vector<float> a(64, 1.f), b(128, 1.f);
    if (comm.rank() == 0) {
      comm.all_reduce(b.data(), b.data(), b.size(), DType::f32, ReduceOp::sum, Algorithm::tree);
      comm.all_reduce(a.data(), a.data(), a.size(), DType::f32, ReduceOp::sum, Algorithm::tree);
    } else {
      comm.all_reduce(a.data(), a.data(), a.size(), DType::f32, ReduceOp::sum, Algorithm::tree);
      comm.all_reduce(b.data(), b.data(), b.size(), DType::f32, ReduceOp::sum, Algorithm::tree);
    }
  }), doctest::Contains("bytes from rank"), Error);  // sizes differ: caught at the first message
}

TEST_CASE("a rank that waits longer than --comm-timeout reports a stall: the collective, its number, who reached it") {
  Watchdog dog(20, "stall");
  RankOptions ro;
  ro.timeout_s = 0.5;
  const double start = now_s();

  std::string report;
  try {
    run_ranks(3, [](Communicator& comm) {
      std::vector<float> a(1000, 1.f);
      comm.all_reduce(a.data(), a.data(), a.size(), DType::f32, ReduceOp::sum);  // #1: all arrive
      if (comm.rank() == 1) {
        comm.set_activity("sleeping past the timeout");
        std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      }
      comm.all_reduce(a.data(), a.data(), a.size(), DType::f32, ReduceOp::sum);  // #2: rank 1 is late
    }, ro);
  } catch (const Error& e) {
    report = e.what();
  }
  const double took = now_s() - start;  // includes rank 1's sleep: run_ranks waits for every rank
  CAPTURE(report);
  CHECK(report.find("has waited") != std::string::npos);
  CHECK(report.find("(--comm-timeout 0.5 s) in all_reduce #2 (3.9 KiB of f32, ring)") != std::string::npos);
  CHECK(report.find("reached all_reduce #2 (3.9 KiB of f32, ring): ranks 0, 2") != std::string::npos);
  CHECK(report.find("rank 1: busy outside communication for") != std::string::npos);
  CHECK(report.find("[last said: sleeping past the timeout]") != std::string::npos);
  CHECK(report.find("rank 1 is still computing") != std::string::npos);
  CHECK(took >= 0.5);
  // The timeout ended the wait, not rank 1's arrival: the report was made after 0.5 s (the check
  // runs every 250 ms).
  const size_t at = report.find("has waited ");
  REQUIRE(at != std::string::npos);
  const double waited = std::stod(report.substr(at + 11));
  CHECK(waited >= 0.5);
  CHECK(waited < 1.0);
}

TEST_CASE("a patient barrier waits past the timeout for a rank that works (rank 0 evaluating)") {
  Watchdog dog(20, "patient");
  RankOptions ro;
  ro.timeout_s = 0.3;
  std::atomic<int> passed{0};
  run_ranks(3, [&](Communicator& comm) {
    if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    comm.barrier_patient("rank 0 evaluates");
    ++passed;
  }, ro);
  CHECK(passed == 3);
  ro.timeout_s = 0;
  CHECK_THROWS_WITH_AS(run_ranks(2, [](Communicator&) {}, ro), doctest::Contains("--comm-timeout must be a positive"),
                       UsageError);
}

TEST_CASE("send and recv of different sizes is reported") {
  Watchdog dog(10, "size mismatch");
  CHECK_THROWS_WITH_AS(run_ranks(2, [](Communicator& comm) {
    std::vector<float> x(5);
    if (comm.rank() == 0) comm.send(x.data(), 4, DType::f32, 1);
    else comm.recv(x.data(), 5, DType::f32, 0);
  }), doctest::Contains("expected 20 bytes from rank 0, which sent 16"), Error);
}

TEST_CASE("send/recv pass tensors around a ring, and barrier separates phases") {
  Watchdog dog(10, "send/recv");
  std::atomic<int> arrived{0};
  run_ranks(4, [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    Tensor mine = Tensor::from({3}, {float(r), float(r) * 10, float(r) * 100});
    Tensor got = Tensor::zeros({3});
    if (r % 2 == 0) {  // even ranks send first, odd ranks receive first: no exchange() needed
      comm.send(mine, (r + 1) % n);
      comm.recv(got, (r + n - 1) % n);
    } else {
      comm.recv(got, (r + n - 1) % n);
      comm.send(mine, (r + 1) % n);
    }
    const float left = float((r + n - 1) % n);
    CHECK(got.to_vector() == std::vector<float>{left, left * 10, left * 100});
    arrived.fetch_add(1);
    comm.barrier();
    CHECK(arrived.load() == 4);  // nobody leaves the barrier before everyone reached it
  });
}

TEST_CASE("all_reduce on a range of a flat tensor touches only that range (DDP buckets)") {
  Watchdog dog(10, "tensor range");
  run_ranks(3, [](Communicator& comm) {
    Tensor flat = Tensor::from({8}, std::vector<float>(8, float(comm.rank() + 1)));
    Tensor bucket = flat.view_at(2, {4});  // elements 2..5
    comm.all_reduce(bucket, ReduceOp::avg, Algorithm::rhd);
    const float own = float(comm.rank() + 1);
    CHECK(flat.to_vector() == std::vector<float>{own, own, 2, 2, 2, 2, own, own});
    Tensor counts = Tensor::zeros({2}, DType::i64);
    if (comm.rank() == 1) counts.data<int64_t>()[1] = 42;
    comm.broadcast(counts, 1);  // a non-f32 buffer, as batch-norm's num_batches_tracked
    CHECK(counts.data<int64_t>()[1] == 42);
  });
}

TEST_CASE("Tensor all_gather and reduce_scatter check their sizes") {
  Watchdog dog(10, "tensor collectives");
  run_ranks(2, [](Communicator& comm) {
    Tensor in = Tensor::from({2}, {float(comm.rank()), 5.f});
    Tensor out = Tensor::zeros({4});
    comm.all_gather(in, out);
    CHECK(out.to_vector() == std::vector<float>{0, 5, 1, 5});
    Tensor half = Tensor::zeros({2});
    comm.reduce_scatter(out, half, ReduceOp::max);
    CHECK(half.to_vector() == (comm.rank() == 0 ? std::vector<float>{0, 5} : std::vector<float>{1, 5}));
    CHECK_THROWS_WITH_AS(comm.all_gather(in, half), doctest::Contains("all_gather: 2 elements where 4"), Error);
    CHECK_THROWS_AS(comm.all_reduce(in, Tensor::zeros({2}, DType::f64), ReduceOp::sum), Error);
  });
}

TEST_CASE("bad arguments are errors on the calling rank, before any communication") {
  Watchdog dog(10, "bad arguments");
  run_ranks(2, [](Communicator& comm) {
    std::vector<float> x(8);
    CHECK_THROWS_WITH_AS(comm.broadcast(x.data(), x.data(), 8, DType::f32, 2),
                         doctest::Contains("root 2 is not a rank"), Error);
    CHECK_THROWS_WITH_AS(comm.all_reduce(x.data(), x.data() + 1, 4, DType::f32, ReduceOp::sum),
                         doctest::Contains("overlap"), Error);
    CHECK_THROWS_WITH_AS(comm.all_reduce(nullptr, x.data(), 4, DType::f32, ReduceOp::sum),
                         doctest::Contains("no send buffer"), Error);
    CHECK_THROWS_AS(comm.send(x.data(), 1, DType::f32, comm.rank()), Error);
  });
  CHECK_THROWS_AS(parse_algorithm("butterfly"), UsageError);
  CHECK(parse_algorithm("rhd") == Algorithm::rhd);
  CHECK(parse_collective("allreduce") == Collective::all_reduce);
  CHECK_THROWS_AS(parse_reduce_op("mean"), UsageError);
}

TEST_CASE("each communicator counts the bytes it sends and its calls") {
  Watchdog dog(10, "byte counters");
  const int k = 4;
  const size_t count = 4 * 1000;  // divisible by k: every ring block has 1000 floats
  run_ranks(k, [&](Communicator& comm) {
    std::vector<float> x(count, 1.f);
    comm.all_reduce(x.data(), x.data(), count, DType::f32, ReduceOp::sum, Algorithm::ring);
    // Ring: n-1 reduce-scatter steps and n-1 all-gather steps of one block each.
    CHECK(comm.bytes_sent() == 2 * (k - 1) * (count / k) * sizeof(float));
    CHECK(comm.stats().bytes_received == comm.bytes_sent());
    comm.reset_stats();
    comm.all_reduce(x.data(), x.data(), count, DType::f32, ReduceOp::sum, Algorithm::naive);
    // Naive: non-roots send their buffer once; the root sends the result to the k-1 others.
    const uint64_t naive = comm.rank() == 0 ? (k - 1) * count * sizeof(float) : count * sizeof(float);
    CHECK(comm.bytes_sent() == naive);
    comm.barrier();
    CommStats s = comm.stats();
    CHECK(s.calls == 2);
    CHECK(s.calls_by_kind[static_cast<size_t>(Collective::all_reduce)] == 1);
    CHECK(s.calls_by_kind[static_cast<size_t>(Collective::barrier)] == 1);
    CHECK(s.bytes_sent == naive);  // a barrier moves no payload
  });
}

TEST_CASE("200 calls in a row, mixing algorithms and collectives, never hang (8 ranks on any machine)") {
  Watchdog dog(10, "200 calls");
  std::atomic<int> wrong{0};
  run_ranks(8, [&](Communicator& comm) {
    const int n = comm.size();
    std::vector<float> x(37), all(37 * n);
    for (int i = 0; i < 200; ++i) {
      const Algorithm algo = kAlgorithms[static_cast<size_t>(i) % kAlgorithms.size()];
      std::fill(x.begin(), x.end(), float(comm.rank() + i));
      if (i % 3 == 0) {
        comm.all_reduce(x.data(), x.data(), x.size(), DType::f32, ReduceOp::sum, algo);
        if (x[36] != float(n * (n - 1) / 2 + n * i)) wrong.fetch_add(1);
      } else if (i % 3 == 1) {
        comm.broadcast(x.data(), x.data(), x.size(), DType::f32, i % n, algo);
        if (x[0] != float(i % n + i)) wrong.fetch_add(1);
      } else {
        comm.all_gather(x.data(), all.data(), x.size(), DType::f32, algo);
        if (all[37 * 5] != float(5 + i)) wrong.fetch_add(1);
        comm.barrier();
      }
    }
  });
  CHECK(wrong.load() == 0);
}

TEST_CASE("more ranks than CPUs works (ranks sleep instead of spinning)") {
  Watchdog dog(10, "oversubscribed");
  const int k = 4 * available_cpus() + 1;
  std::vector<double> sums(static_cast<size_t>(k));
  run_ranks(k, [&](Communicator& comm) {
    double x = comm.rank();
    comm.all_reduce(&x, &x, 1, DType::f64, ReduceOp::sum, Algorithm::tree);
    sums[static_cast<size_t>(comm.rank())] = x;
  });
  for (double s : sums) CHECK(s == double(k) * (k - 1) / 2);
}

TEST_CASE("a rank's communicator may be driven from another thread (DDP's communication thread)") {
  Watchdog dog(10, "comm thread");
  run_ranks(3, [](Communicator& comm) {
    float x = 1;
    std::thread worker([&] { comm.all_reduce(&x, &x, 1, DType::f32, ReduceOp::sum); });
    worker.join();
    CHECK(x == 3);
  });
}

TEST_CASE("pinning puts rank r on one CPU and gives the threads their old affinity back") {
  Watchdog dog(10, "pinning");
  cpu_set_t before;
  REQUIRE(sched_getaffinity(0, sizeof(before), &before) == 0);
  RankOptions ro;
  ro.pin_threads = true;
  std::vector<int> cpus_per_rank(3, 0);
  run_ranks(3, [&](Communicator& comm) {
    cpu_set_t now;
    sched_getaffinity(0, sizeof(now), &now);
    cpus_per_rank[static_cast<size_t>(comm.rank())] = CPU_COUNT(&now);
    comm.barrier();
  }, ro);
  for (int c : cpus_per_rank) CHECK(c == 1);
  cpu_set_t after;
  REQUIRE(sched_getaffinity(0, sizeof(after), &after) == 0);  // this thread was rank 0
  CHECK(CPU_EQUAL(&before, &after));
}
