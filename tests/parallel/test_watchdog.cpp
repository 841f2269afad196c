// The process's one watchdog (parallel/runtime/watchdog.hpp) as every backend uses it: a published
// wait past the timeout ends in the stall report, what ends in time or waits patiently does not;
// and the one stop vote (parallel/runtime/stop_vote.hpp): every rank stops after the same update.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "parallel/runtime/stop_vote.hpp"
#include "parallel/runtime/watchdog.hpp"

using namespace dpx;
using namespace dpx::parallel;

namespace {

// A communicator's ranks as a backend publishes them (nccl's do so while they poll their stream).
struct Published {
  std::mutex m;
  std::condition_variable cv;
  std::string report;
  std::shared_ptr<CommWatch> watch;

  Published(int size, double timeout_s) {
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r);
    watch = std::make_shared<CommWatch>("gpus", size, ranks, timeout_s, [this](const std::string& text) {
      std::lock_guard<std::mutex> lock(m);
      report = text;
      cv.notify_all();
    });
    Watchdog::of_process().watch(watch);
  }
  ~Published() { Watchdog::of_process().forget(watch.get()); }
  // The report, or "" after `seconds`.
  std::string wait_report(double seconds) {
    std::unique_lock<std::mutex> lock(m);
    cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return !report.empty(); });
    return report;
  }
};

CommCall all_reduce_call(uint64_t seq) {
  CommCall c;
  c.kind = Collective::all_reduce;
  c.seq = seq;
  c.bytes = 4096;
  c.dtype = DType::f32;
  return c;
}

}  // namespace

TEST_CASE("the watchdog times a published wait of any communicator and ends it with the stall report") {
  Published p(3, 0.2);
  const double start = now_s();
  p.watch->begin_call(0, all_reduce_call(3));
  p.watch->begin_call(2, all_reduce_call(3));
  p.watch->begin_wait(0, 1);
  p.watch->set_activity(1, "computing");
  const std::string report = p.wait_report(5);
  CAPTURE(report);
  CHECK(now_s() - start >= 0.2);
  CHECK(now_s() - start < 2.0);
  CHECK(report.find("stall: rank 0 has waited") != std::string::npos);
  CHECK(report.find("(--comm-timeout 0.2 s) in all_reduce #3 (4.0 KiB of f32, ring) on the gpus communicator, for "
                    "rank 1") != std::string::npos);
  CHECK(report.find("reached all_reduce #3 (4.0 KiB of f32, ring): ranks 0, 2") != std::string::npos);
  CHECK(report.find("rank 1: busy outside communication") != std::string::npos);
  CHECK(report.find("[last said: computing]") != std::string::npos);
}

TEST_CASE("time the process stood still (SIGSTOP, a suspend) is forgiven: the waits then in progress are not late") {
  Published p(2, 0.5);
  p.watch->begin_call(1, all_reduce_call(4));  // in a call, not waiting: nothing to forgive
  CHECK(p.watch->forgive(10) == 0);
  p.watch->begin_call(0, all_reduce_call(4));
  p.watch->begin_wait(0, 1);
  CHECK(p.watch->forgive(10) == 1);  // as if frozen for 10 s just now
  CHECK(p.wait_report(1.0).empty());  // 1 s of waiting, but 10 s of it were frozen
  p.watch->end_wait(0);
  p.watch->begin_wait(0, 1);  // a new wait is timed from its start
  CHECK_FALSE(p.wait_report(5).empty());
}

TEST_CASE("a wait that ends in time, a patient one and a call that does not wait are never reported") {
  Published p(2, 0.2);
  p.watch->begin_call(0, all_reduce_call(1));  // in a call, computing its reduction: not a wait
  CommCall patient = all_reduce_call(2);
  patient.kind = Collective::barrier;
  patient.patient = true;
  p.watch->begin_call(1, patient);
  p.watch->begin_wait(1, -1);
  for (int i = 0; i < 5; ++i) {  // waits of 0.1 s, one after the other
    p.watch->begin_wait(0, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    p.watch->end_wait(0);
  }
  CHECK(p.wait_report(0.3).empty());
  // A wait outside a call (for work queued on a GPU stream) is a wait in the call it names.
  const CommCall queued = all_reduce_call(9);
  p.watch->end_call(0);
  p.watch->begin_wait(0, -1, &queued);
  CHECK(p.watch->status(0).state == RankStatus::State::in_call);
  const std::string report = p.wait_report(5);
  CHECK(report.find("in all_reduce #9") != std::string::npos);
}

TEST_CASE("the stop vote: every rank stops after the same update, the one after the first rank was asked, by its signal") {
  for (int asked_at : {0, 3}) {
    CAPTURE(asked_at);
    std::vector<int> stopped_at(3, -1), stopped_by(3, 0);
    run_ranks(3, [&](Communicator& comm) {
      StopVote vote(&comm);
      const size_t me = static_cast<size_t>(comm.rank());
      for (int update = 0; update < 8 && stopped_at[me] < 0; ++update) {
        // Rank 1 alone is asked, by SIGINT, at `asked_at`, and stays asked (a signal is not taken back).
        const int asked = comm.rank() == 1 && update >= asked_at ? SIGINT : 0;
        if (const int signal = vote.vote(asked)) stopped_at[me] = update, stopped_by[me] = signal;
        if (comm.rank() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a slower rank
      }
    });
    for (int r = 0; r < 3; ++r) {
      CHECK(stopped_at[static_cast<size_t>(r)] == asked_at + 1);
      CHECK(stopped_by[static_cast<size_t>(r)] == SIGINT);  // not the SIGTERM the others never got
    }
  }
  StopVote alone(nullptr);  // a rank alone stops when asked
  CHECK(alone.vote(0) == 0);
  CHECK(alone.vote(SIGHUP) == SIGHUP);
}
