// The threads backend (see threads_backend.hpp). Each ordered pair of ranks shares a one-slot
// mailbox: the sender posts a pointer and waits until the receiver has copied or reduced the
// data out of it (one pass over the bytes, no staging copy). Waiting spins briefly when every
// rank has a CPU of its own, then sleeps on the rank's condition variable.
#include "parallel/comm/threads/threads_backend.hpp"

#include "parallel/comm/threads/thread_ranks.hpp"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "parallel/runtime/stall_report.hpp"
#include "parallel/runtime/watchdog.hpp"

namespace dpx::parallel {

class ThreadWorld {
 public:
  struct alignas(64) Mailbox {  // messages from one rank to another, one at a time
    std::atomic<uint64_t> posted{0};  // written by the sender
    std::atomic<uint64_t> taken{0};   // written by the receiver
    const void* data = nullptr;       // valid while posted > taken
    size_t bytes = 0;
    const void* token = nullptr;      // the sender's before_send()
    // Who may touch `data`: set by the sender when it posts; the receiver claims the message by
    // clearing it before it reads, a failing sender withdraws it by clearing it first. Whoever
    // clears it decides: a withdrawn message is never read, a claimed one is read to the end
    // before its sender may leave (and free the buffer).
    std::atomic<bool> open{false};
  };

  ThreadWorld(int k, double timeout_s, const char* backend)
      : k_(k), boxes_(static_cast<size_t>(k) * k), waiters_(static_cast<size_t>(k)),
        finished_(new std::atomic<bool>[static_cast<size_t>(k)]), spin_(k <= available_cpus() ? 200 : 0) {
    for (int r = 0; r < k; ++r) finished_[r] = false;
    std::vector<int> ranks(static_cast<size_t>(k));
    for (int r = 0; r < k; ++r) ranks[static_cast<size_t>(r)] = r;
    // The process's watchdog times every wait (its stall report ends them, as does a deadlock).
    watch_ = std::make_shared<CommWatch>(
        backend, k, std::move(ranks), timeout_s, [this](const std::string& report) { stop(report); },
        [this] { return deadlock_report(); });
    Watchdog::of_process().watch(watch_);
  }
  ~ThreadWorld() { Watchdog::of_process().forget(watch_.get()); }

  CommWatch& watch() { return *watch_; }
  int size() const { return k_; }
  Mailbox& box(int from, int to) { return boxes_[static_cast<size_t>(from) * k_ + to]; }

  void wake(int rank) {
    Waiter& w = waiters_[static_cast<size_t>(rank)];
    { std::lock_guard<std::mutex> lock(w.m); }  // a waiter between its check and its sleep gets the notify
    w.cv.notify_all();
  }
  void wake_all() {
    for (int r = 0; r < k_; ++r) wake(r);
  }

  void check_abort() const {
    if (aborted_.load(std::memory_order_acquire)) throw_aborted();
  }

  // Blocks `me` until counter >= target. `peer` is the rank that must act (-1: any, for the
  // barrier); if it has returned from its rank function it never will, and waiting is an error.
  // While asleep, the rank publishes what it waits for: the watchdog times the wait, and tells a
  // deadlock (every running rank asleep on a false condition) from a slow peer.
  void wait(int me, int peer, const std::atomic<uint64_t>& counter, uint64_t target, const char* doing) {
    auto ready = [&] { return counter.load(std::memory_order_acquire) >= target; };
    for (int i = 0; i < spin_; ++i) {
      if (ready()) return;
      check_abort();
      if (i < 64) cpu_relax(); else std::this_thread::yield();
    }
    Waiter& w = waiters_[static_cast<size_t>(me)];
    w.counter.store(&counter);
    w.target.store(target);
    w.peer.store(peer);
    w.doing.store(doing);
    w.asleep.fetch_add(1);  // odd: asleep
    watch_->begin_wait(me, peer);
    struct Awake {
      std::atomic<uint64_t>& asleep;
      CommWatch& watch;
      int me;
      ~Awake() {
        watch.end_wait(me);
        asleep.fetch_add(1);
      }
    } awake{w.asleep, *watch_, me};
    std::unique_lock<std::mutex> lock(w.m);
    for (;;) {
      if (ready()) return;
      check_abort();
      int gone = finished_peer(peer);
      if (gone >= 0) {
        if (ready()) return;  // it acted, then returned
        fail("rank ", gone, " returned from its rank function while rank ", me, " was waiting to ", doing,
             peer >= 0 ? " it" : "", ": the ranks did not call the same sequence of collectives");
      }
      w.cv.wait(lock);
    }
  }

  // The deadlock's report when every rank still running is asleep in wait() on a condition that
  // is false (no rank can then make any other progress), else "". The `asleep` counters, read
  // before and after the conditions, prove that nobody woke (and so nobody acted) meanwhile.
  std::string deadlock_report() const {
    std::vector<uint64_t> before(static_cast<size_t>(k_), 0);
    int running = 0;
    for (int q = 0; q < k_; ++q) {
      if (finished_[q].load()) continue;
      before[q] = waiters_[q].asleep.load();
      if (before[q] % 2 == 0) return "";  // running
      ++running;
    }
    if (running == 0) return "";  // every rank has returned
    std::string who;
    for (int q = 0; q < k_; ++q) {
      if (before[q] % 2 == 0) continue;  // had returned
      const Waiter& w = waiters_[q];
      if (w.counter.load()->load() >= w.target.load()) return "";  // about to wake
      const int peer = w.peer.load();
      const RankStatus st = watch_->status(q);
      const bool point_to_point = st.call.kind == Collective::send || st.call.kind == Collective::recv;
      const std::string call = st.state == RankStatus::State::in_call && !point_to_point ? " in " + describe_call(st.call) : "";
      who += detail::concat(who.empty() ? "" : "; ", "rank ", q, call, " waits to ", w.doing.load(),
                            peer >= 0 ? detail::concat(" rank ", peer) : std::string());
    }
    for (int q = 0; q < k_; ++q)  // nobody woke, and nobody returned, meanwhile
      if (before[q] % 2 == 1 && (finished_[q].load() || waiters_[q].asleep.load() != before[q])) return "";
    return detail::concat("deadlock: every running rank waits for another (", who,
                          "): the ranks called different collectives, or the same ones in a different order");
  }

  // Rank `rank` failed: every other rank's wait ends in "rank R aborted: <reason>". With rank
  // < 0 (stop), the watchdog ended the world: every wait ends in `reason`, its report. The
  // first end wins.
  void abort(int rank, const std::string& reason) {
    {
      std::lock_guard<std::mutex> lock(abort_mu_);
      if (abort_rank_ < 0 && !stopped_) {
        if (rank >= 0) abort_rank_ = rank;
        else stopped_ = true;
        abort_reason_ = reason;
      }
    }
    aborted_.store(true, std::memory_order_release);
    wake_all();
  }
  void stop(const std::string& report) { abort(-1, report); }

  // What run_thread_ranks rethrows rather than the ranks' errors: the watchdog's report, if any.
  std::string stop_report() const {
    std::lock_guard<std::mutex> lock(abort_mu_);
    return stopped_ ? abort_reason_ : std::string();
  }

  void finish(int rank) {
    watch_->set_finished(rank);
    finished_[rank].store(true);
    wake_all();
  }

  void barrier(int me) {
    check_abort();
    uint64_t gen;
    bool last;
    {
      std::lock_guard<std::mutex> lock(barrier_mu_);
      gen = generation_.load();
      last = ++arrived_ == k_;
      if (last) {
        arrived_ = 0;
        generation_.store(gen + 1);
      }
    }
    if (last) {
      wake_all();
      return;
    }
    wait(me, -1, generation_, gen + 1, "meet in a barrier");
  }

 private:
  struct alignas(64) Waiter {
    std::mutex m;
    std::condition_variable cv;
    // What the rank waits for while asleep in wait(), for deadlock_report.
    std::atomic<uint64_t> asleep{0};  // odd while asleep
    std::atomic<const std::atomic<uint64_t>*> counter{nullptr};
    std::atomic<uint64_t> target{0};
    std::atomic<int> peer{-1};
    std::atomic<const char*> doing{""};
  };

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  int finished_peer(int peer) const {
    if (peer >= 0) return finished_[peer].load() ? peer : -1;
    for (int r = 0; r < k_; ++r)
      if (finished_[r].load()) return r;
    return -1;
  }

  [[noreturn]] void throw_aborted() const {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (stopped_) throw Error(abort_reason_);
    throw Error(detail::concat("rank ", abort_rank_, " aborted: ", abort_reason_));
  }

  const int k_;
  std::vector<Mailbox> boxes_;
  std::vector<Waiter> waiters_;
  std::unique_ptr<std::atomic<bool>[]> finished_;
  const int spin_;
  std::shared_ptr<CommWatch> watch_;

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  int abort_rank_ = -1;
  bool stopped_ = false;  // by the watchdog
  std::string abort_reason_;

  std::mutex barrier_mu_;
  int arrived_ = 0;
  std::atomic<uint64_t> generation_{0};
};

namespace {

// The threads backend's transport: the receiver copies or reduces host memory straight out of
// the sender's buffer.
class ThreadsTransport final : public ThreadRankTransport {
 public:
  using ThreadRankTransport::ThreadRankTransport;
  std::string_view name() const override { return "threads"; }
  bool accepts(Device device) const override { return device.is_cpu(); }

 protected:
  void deliver(const Exchange& x, const void* incoming, const void*) override {
    if (x.reduce_with)
      reduce_into(x.recv, x.reduce_with, incoming, x.recv_bytes / dtype_size(x.dtype), x.dtype, x.op);
    else if (x.recv_bytes > 0)
      std::memcpy(x.recv, incoming, x.recv_bytes);
  }
};

}  // namespace

int ThreadRankTransport::size() const { return world_.size(); }
void ThreadRankTransport::barrier() { world_.barrier(rank_); }
void ThreadRankTransport::begin_call(const CommCall& call) { world_.watch().begin_call(rank_, call); }
void ThreadRankTransport::end_call() { world_.watch().end_call(rank_); }
void ThreadRankTransport::set_activity(std::string_view what) { world_.watch().set_activity(rank_, what); }

void ThreadRankTransport::do_exchange(const Exchange& x) {
  world_.check_abort();
  ThreadWorld::Mailbox* out = nullptr;
  uint64_t seq = 0;
  if (x.send_peer >= 0) {
    check_peer(x.send_peer);
    out = &world_.box(rank_, x.send_peer);
    out->data = x.send;
    out->bytes = x.send_bytes;
    out->token = before_send(x);
    out->open.store(true);
    seq = out->posted.load(std::memory_order_relaxed) + 1;
    out->posted.store(seq, std::memory_order_release);
    world_.wake(x.send_peer);
  }
  try {
    if (x.recv_peer >= 0) receive(x);
    if (out) world_.wait(rank_, x.send_peer, out->taken, seq, "send to");
  } catch (...) {
    // This rank leaves early (another aborted, a timeout, a bad count): its caller will free
    // x.send, so no receiver may still read it. Withdraw the message, or, if the receiver has
    // claimed it, let it finish its copy first (a copy or a reduction: it cannot block).
    bool open = true;
    if (out && !out->open.compare_exchange_strong(open, false))
      while (out->taken.load(std::memory_order_acquire) < seq) std::this_thread::yield();
    throw;
  }
}

void ThreadRankTransport::receive(const Exchange& x) {
  check_peer(x.recv_peer);
  ThreadWorld::Mailbox& in = world_.box(x.recv_peer, rank_);
  const uint64_t want = in.taken.load(std::memory_order_relaxed) + 1;
  world_.wait(rank_, x.recv_peer, in.posted, want, "receive from");
  if (in.bytes != x.recv_bytes)
    fail("rank ", rank_, " expected ", x.recv_bytes, " bytes from rank ", x.recv_peer, ", which sent ", in.bytes,
         ": the ranks called different collectives or passed different counts");
  bool open = true;
  if (!in.open.compare_exchange_strong(open, false)) {
    // Its sender withdrew it: that rank is failing, and its error, the cause, is about to abort
    // the world. Report that error rather than this one (unless it never comes).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      world_.check_abort();
      std::this_thread::yield();
    }
    fail("rank ", x.recv_peer, " left the exchange before rank ", rank_, " could receive its message");
  }
  // The message is claimed: it is marked taken even if the move fails, so that its sender,
  // waiting for exactly that, can leave (the failure aborts every rank).
  struct Taken {
    ThreadWorld& world;
    ThreadWorld::Mailbox& in;
    uint64_t want;
    int peer;
    ~Taken() {
      in.taken.store(want, std::memory_order_release);
      world.wake(peer);
    }
  } taken{world_, in, want, x.recv_peer};
  deliver(x, in.data, in.token);
}

void ThreadRankTransport::check_peer(int peer) const {
  DPX_CHECK(peer >= 0 && peer < world_.size() && peer != rank_, "rank ", rank_, ": bad peer ", peer, " of ",
            world_.size(), " ranks");
}

namespace {

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// Pins the calling thread to one CPU and restores its previous mask when destroyed, so the
// OpenMP threads that are reused after run_ranks are not left pinned.
class PinGuard {
 public:
  PinGuard(const std::vector<int>& cpus, int rank) {
    if (cpus.empty()) return;
    pthread_t self = pthread_self();
    if (pthread_getaffinity_np(self, sizeof(saved_), &saved_) != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    const int cpu = cpus[static_cast<size_t>(rank) % cpus.size()];
    CPU_SET(cpu, &one);
    int err = pthread_setaffinity_np(self, sizeof(one), &one);
    if (err != 0) fail("could not pin rank ", rank, " to CPU ", cpu, ": ", std::strerror(err));
    pinned_ = true;
  }
  ~PinGuard() {
    if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_);
  }
  PinGuard(const PinGuard&) = delete;
  PinGuard& operator=(const PinGuard&) = delete;

 private:
  cpu_set_t saved_{};
  bool pinned_ = false;
};

std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

int available_cpus() {
  int n = static_cast<int>(allowed_cpus().size());
  if (n > 0) return n;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

namespace {

std::unique_ptr<ThreadRankTransport> threads_transport(ThreadWorld& world, int rank) {
  return std::make_unique<ThreadsTransport>(world, rank);
}

// The ranks, with a data world beside the host one when `make_data` is not null.
void run_worlds(int k, const std::function<void(Communicator& host, Communicator& data)>& fn,
                const RankOptions& options, const ThreadTransportMaker& make_data, const char* backend) {
  if (k < 1) usage_fail("the number of ranks must be at least 1, not ", k);
  if (!(options.timeout_s > 0)) usage_fail("--comm-timeout must be a positive number of seconds (got ", options.timeout_s, ")");
  if (options.ranks_per_node < 0) usage_fail("--ranks-per-node must be >= 1 (got ", options.ranks_per_node, ")");
  // The host world, and the data world where the data travel apart (its own mailboxes).
  ThreadWorld host_world(k, options.timeout_s, make_data ? "threads" : backend);
  std::optional<ThreadWorld> data_world;
  if (make_data) data_world.emplace(k, options.timeout_s, backend);
  std::vector<int> layout;
  if (options.ranks_per_node > 0)
    for (int r = 0; r < k; ++r) layout.push_back(r / options.ranks_per_node);
  std::mutex first_mu;
  std::exception_ptr first;
  auto record = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(first_mu);
    if (!first) first = std::move(e);
  };
  const std::vector<int> cpus = options.pin_threads ? allowed_cpus() : std::vector<int>{};
  // Exactly k threads, and room for each rank's kernels to open their own parallel regions
  // (ctx.threads = cores / ranks) inside this one.
  omp_set_dynamic(0);
  if (omp_get_max_active_levels() < omp_get_active_level() + 2) omp_set_max_active_levels(omp_get_active_level() + 2);
#pragma omp parallel num_threads(k)
  {
    const int r = omp_get_thread_num();
    if (omp_get_num_threads() != k) {
      if (r == 0)
        record(std::make_exception_ptr(Error(detail::concat(
            "run_ranks: OpenMP gave ", omp_get_num_threads(), " threads for ", k,
            " ranks (is OMP_THREAD_LIMIT set, or is run_ranks called inside a parallel region?)"))));
    } else {
      std::unique_ptr<ThreadRankTransport> host_transport, data_transport;
      std::unique_ptr<Communicator> host, data;
      auto communicator = [&](ThreadRankTransport& t, bool data_side) {
        t.set_node_layout(layout);
        if (data_side) t.set_net_sim(options.net_sim);  // the data's exchanges, not the votes'
        return std::make_unique<Communicator>(t);
      };
      try {
        PinGuard pin(cpus, r);
        host_transport = std::make_unique<ThreadsTransport>(host_world, r);
        host = communicator(*host_transport, !data_world);
        if (data_world) {
          data_transport = make_data(*data_world, r);
          data = communicator(*data_transport, true);
        }
        fn(*host, data ? *data : *host);
        host_world.finish(r);
        if (data_world) data_world->finish(r);
      } catch (...) {
        // Recorded before the abort, so the first exception is the cause, not a woken waiter.
        record(std::current_exception());
        const std::string why = describe(std::current_exception());
        host_world.abort(r, why);
        if (data_world) data_world->abort(r, why);
      }
      // After the abort: a call still in flight on a communication thread ends with it.
      data.reset();
      data_transport.reset();
      host.reset();
      host_transport.reset();
    }
  }
  for (const ThreadWorld* world : {&host_world, data_world ? &*data_world : nullptr})
    if (world && !world->stop_report().empty()) throw Error(world->stop_report());
  if (first) std::rethrow_exception(first);
}

}  // namespace

void run_ranks(int k, const std::function<void(Communicator&)>& fn, const RankOptions& options) {
  run_worlds(k, [&](Communicator& comm, Communicator&) { fn(comm); }, options, nullptr, "threads");
}

void run_thread_ranks(int k, const std::function<void(Communicator& host, Communicator& data)>& fn,
                      const RankOptions& options, const ThreadTransportMaker& make_data, const char* backend) {
  run_worlds(k, fn, options, make_data ? make_data : threads_transport, backend);
}

}  // namespace dpx::parallel
