// The process's watchdog (see watchdog.hpp): what each rank publishes, and the thread that times it.
#include "parallel/runtime/watchdog.hpp"

#include <chrono>
#include <cstdio>

#include "core/clock.hpp"
#include "core/error.hpp"

namespace dpx::parallel {

namespace {

// How often the thread looks: a stall is seen within this of its timeout.
constexpr auto kRound = std::chrono::milliseconds(20);
// A round that came this much later than due: the process was frozen meanwhile (a thread that
// sleeps 20 ms is not kept from running for seconds by a busy machine).
constexpr double kFrozenS = 2.0;
// How often thread ranks are asked whether they all wait for each other.
constexpr int kRoundsPerDeadlockCheck = 12;

}  // namespace

// ---- CommWatch ------------------------------------------------------------------------------------

CommWatch::CommWatch(std::string label, int size, std::vector<int> local, double timeout_s, Stop stop,
                     DeadlockCheck deadlock)
    : label_(std::move(label)), size_(size), timeout_s_(timeout_s), stop_(std::move(stop)), deadlock_(std::move(deadlock)) {
  for (int r : local) {
    auto e = std::make_unique<Entry>();
    e->rank = r;
    e->since_s = now_s();
    entries_.push_back(std::move(e));
  }
}

CommWatch::Entry* CommWatch::entry(int rank) const {
  for (const auto& e : entries_)
    if (e->rank == rank) return e.get();
  fail("rank ", rank, " of the ", label_, " communicator does not live in this process");
}

void CommWatch::begin_call(int rank, const CommCall& call) {
  Entry& e = *entry(rank);
  std::lock_guard<std::mutex> lock(e.m);
  e.in_call = true;
  e.waiting = e.call_of_wait = false;
  e.call = call;
  e.since_s = now_s();
}

void CommWatch::end_call(int rank) {
  Entry& e = *entry(rank);
  std::lock_guard<std::mutex> lock(e.m);
  e.in_call = e.waiting = e.call_of_wait = false;
  e.since_s = now_s();
}

void CommWatch::begin_wait(int rank, int peer, const CommCall* call) {
  Entry& e = *entry(rank);
  std::lock_guard<std::mutex> lock(e.m);
  if (call && !e.in_call) {
    e.in_call = e.call_of_wait = true;
    e.call = *call;
    e.since_s = now_s();
  }
  e.waiting = true;
  e.wait_since_s = now_s();
  e.waiting_for = peer;
}

void CommWatch::end_wait(int rank) {
  Entry& e = *entry(rank);
  std::lock_guard<std::mutex> lock(e.m);
  e.waiting = false;
  if (e.call_of_wait) {
    e.in_call = e.call_of_wait = false;
    e.since_s = now_s();
  }
}

void CommWatch::set_activity(int rank, std::string_view what) {
  Entry& e = *entry(rank);
  std::lock_guard<std::mutex> lock(e.m);
  e.activity.assign(what);
}

void CommWatch::set_finished(int rank) {
  Entry& e = *entry(rank);
  std::lock_guard<std::mutex> lock(e.m);
  e.finished = true;
}

int CommWatch::forgive(double seconds) {
  int waits = 0;
  for (const auto& e : entries_) {
    std::lock_guard<std::mutex> lock(e->m);
    if (!e->in_call) continue;
    e->since_s += seconds;
    if (e->waiting) e->wait_since_s += seconds, ++waits;
  }
  return waits;
}

RankStatus CommWatch::status(int rank) const {
  const Entry& e = *entry(rank);
  std::lock_guard<std::mutex> lock(e.m);
  RankStatus s;
  s.rank = rank;
  s.comm = label_;
  s.activity = e.activity;
  s.call = e.call;
  s.for_s = now_s() - e.since_s;
  s.state = e.finished ? RankStatus::State::finished : e.in_call ? RankStatus::State::in_call : RankStatus::State::busy;
  return s;
}

std::vector<RankStatus> CommWatch::statuses() const {
  std::vector<RankStatus> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    all[static_cast<size_t>(r)].rank = r;
    all[static_cast<size_t>(r)].state = RankStatus::State::no_answer;
  }
  for (const auto& e : entries_) all[static_cast<size_t>(e->rank)] = status(e->rank);
  return all;
}

bool CommWatch::stalled(StallPoint& at) const {
  const double now = now_s(), timeout = timeout_s();
  for (const auto& e : entries_) {
    std::lock_guard<std::mutex> lock(e->m);
    if (!e->in_call || !e->waiting || e->finished || now - e->wait_since_s < timeout) continue;
    at.rank = e->rank;
    at.call = e->call;
    at.comm = label_;
    at.waited_s = now - e->wait_since_s;
    at.timeout_s = timeout;
    at.waiting_for = e->waiting_for;
    return true;
  }
  return false;
}

// ---- Watchdog -------------------------------------------------------------------------------------

Watchdog& Watchdog::of_process() {
  static Watchdog dog;
  return dog;
}

Watchdog::~Watchdog() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void Watchdog::watch(const std::shared_ptr<CommWatch>& comm) {
  std::lock_guard<std::mutex> lock(m_);
  watched_.push_back(comm);
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void Watchdog::forget(const CommWatch* comm) {
  std::lock_guard<std::mutex> acting(acting_);
  std::lock_guard<std::mutex> lock(m_);
  std::erase_if(watched_, [&](const auto& w) { return w.get() == comm; });
}

void Watchdog::set_peers(Peers* peers) {
  std::lock_guard<std::mutex> acting(acting_);
  std::lock_guard<std::mutex> lock(m_);
  peers_ = peers;
  if (peers_ && !thread_.joinable()) thread_ = std::thread([this] { run(); });
}

RankStatus Watchdog::status_for(std::string_view label) const {
  std::lock_guard<std::mutex> lock(m_);
  const CommWatch* any_call = nullptr;
  for (const auto& w : watched_) {
    if (w->entries_.empty()) continue;
    const RankStatus s = w->status(w->entries_.front()->rank);
    if (w->label() == label) return s;
    if (!any_call && s.state == RankStatus::State::in_call) any_call = w.get();
  }
  if (any_call) return any_call->status(any_call->entries_.front()->rank);
  RankStatus s;
  s.comm = std::string(label);
  for (const auto& w : watched_)  // busy: the first communicator's words
    if (!w->entries_.empty()) return w->status(w->entries_.front()->rank);
  return s;
}

void Watchdog::run() {
  double last_round_s = now_s();
  for (int round = 0; !stop_.load(); ++round) {
    std::this_thread::sleep_for(kRound);
    std::lock_guard<std::mutex> acting(acting_);
    Peers* peers = nullptr;
    std::vector<std::shared_ptr<CommWatch>> comms;
    {
      std::lock_guard<std::mutex> lock(m_);
      peers = peers_;
      comms = watched_;
    }
    // Suspended, not hung: the whole process stood still, so no rank of it was late.
    const double now = now_s(), frozen_s = now - last_round_s - std::chrono::duration<double>(kRound).count();
    last_round_s = now;
    if (frozen_s >= kFrozenS && !comms.empty()) {
      int waits = 0;
      for (const auto& comm : comms) waits += comm->forgive(frozen_s);
      if (waits > 0)
        std::fprintf(stderr,
                     "dpx: this process was frozen for %.1f s (SIGSTOP, a scheduler's suspend, or other processes that kept it off the cores), not hung: %d wait%s in "
                     "communication not counted toward --comm-timeout\n",
                     frozen_s, waits, waits == 1 ? "" : "s");
      else
        std::fprintf(stderr, "dpx: this process was frozen for %.1f s (SIGSTOP, a scheduler's suspend, or other processes that kept it off the cores), not hung\n",
                     frozen_s);
      std::fflush(stderr);
    }
    if (peers) peers->serve();
    for (const auto& comm : comms) {
      {
        std::lock_guard<std::mutex> lock(m_);
        if (comm->stopped_) continue;
      }
      StallPoint at;
      std::string report;
      if (comm->stalled(at)) {
        if (peers) {
          if (peers->stalled(at)) continue;  // a patient wait whose ranks all answer
        } else if (!at.call.patient) {
          report = stall_report(at, comm->statuses());
        }
      } else if (comm->deadlock_ && round % kRoundsPerDeadlockCheck == 0) {
        report = comm->deadlock_();
      }
      if (report.empty()) continue;
      {
        std::lock_guard<std::mutex> lock(m_);
        comm->stopped_ = true;
      }
      if (comm->stop_) comm->stop_(report);
    }
  }
}

}  // namespace dpx::parallel
