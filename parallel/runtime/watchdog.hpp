// The one watchdog of this process, after Horovod's stall inspector and PyTorch's NCCL watchdog.
// Every communicator publishes here what each of its ranks in this process is in: the call, its
// number and size, since when, and whether (and on whom) the rank waits; and what the rank last
// said it does. One thread per process times every such wait against its communicator's
// --comm-timeout, for every backend (threads, p2p, mpi, nccl), asks the thread ranks whether they
// all wait for each other (a deadlock), and on a stall writes the one report (stall_report.hpp)
// and ends the wait. A process that was frozen (SIGSTOP, a scheduler's suspend: the thread's own
// rounds stop) is told from a hung one by the gap between two rounds: the frozen time is not
// counted toward the timeout, and the process says so. Under MPI the other processes are asked for theirs and the report ends the
// job (MpiPeers, runtime/mpi/mpi_peers.hpp).
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "parallel/runtime/stall_report.hpp"

namespace dpx::parallel {

// One communicator's ranks in this process, as they publish to the watchdog (the transports do,
// from whichever thread communicates).
class CommWatch {
 public:
  // How a backend ends the waits of its ranks once the watchdog has decided (a stall report, or
  // a deadlock's): the waiting ranks then throw `report`.
  using Stop = std::function<void(const std::string& report)>;
  // Whether the communicator's ranks all wait for each other: a report, or "" (thread ranks).
  using DeadlockCheck = std::function<std::string()>;

  // `label` names the communicator in reports ("world", "ranks 0-3", "threads", "nccl"); `size`
  // its ranks; `local` those that live in this process.
  CommWatch(std::string label, int size, std::vector<int> local, double timeout_s, Stop stop,
            DeadlockCheck deadlock = {});

  void begin_call(int rank, const CommCall& call);
  void end_call(int rank);
  // A wait on `peer` (-1: several, or a device) begins, or ends: only a wait is timed. A wait
  // outside a call (for calls queued on a GPU stream) is a wait in `call` while it lasts.
  void begin_wait(int rank, int peer, const CommCall* call = nullptr);
  void end_wait(int rank);
  void set_activity(int rank, std::string_view what);
  void set_finished(int rank);
  void set_timeout(double seconds) { timeout_s_.store(seconds); }
  // The process did not run for `seconds` (stopped by SIGSTOP, suspended by a scheduler): the
  // waits then in progress are not counted for that long, since nobody was late. How many were.
  int forgive(double seconds);

  const std::string& label() const { return label_; }
  double timeout_s() const { return timeout_s_.load(); }
  // What rank `rank` of this process does now.
  RankStatus status(int rank) const;
  // Every rank's status, in rank order; ranks of other processes: no_answer (the MPI peers ask them).
  std::vector<RankStatus> statuses() const;

 private:
  friend class Watchdog;
  struct alignas(64) Entry {
    mutable std::mutex m;
    int rank = 0;
    bool in_call = false, waiting = false, finished = false;
    bool call_of_wait = false;  // in_call since begin_wait, until end_wait
    CommCall call;
    double since_s = 0;       // the last begin or end of a call
    double wait_since_s = 0;  // the current wait's start
    int waiting_for = -1;
    std::string activity;
  };
  Entry* entry(int rank) const;
  // A local rank that has waited longer than the timeout in a call, if any (at.call.patient says
  // whether it is a patient one).
  bool stalled(StallPoint& at) const;

  const std::string label_;
  const int size_;
  std::atomic<double> timeout_s_;
  const Stop stop_;
  const DeadlockCheck deadlock_;
  std::vector<std::unique_ptr<Entry>> entries_;  // one per local rank
  bool stopped_ = false;                         // the watchdog has ended its waits (guarded by the watchdog's lock)
};

// How the processes of an MPI job settle a stall together (runtime/mpi/mpi_peers.cpp).
class Peers {
 public:
  virtual ~Peers() = default;
  // Called every round of the watchdog: answers the other processes, notices vanished ones.
  virtual void serve() = 0;
  // A stall at `at` on this process: for a patient call, true while every process still
  // answers; otherwise it asks every process, the job's report is printed and the job ends.
  virtual bool stalled(const StallPoint& at) = 0;
};

class Watchdog {
 public:
  // The watchdog of this process (its thread starts with the first communicator it watches).
  static Watchdog& of_process();
  ~Watchdog();

  // Watches `comm` until forget() (which its owner calls before it goes).
  void watch(const std::shared_ptr<CommWatch>& comm);
  void forget(const CommWatch* comm);
  // The MPI job's peers (null: none). Set before the job's communicators are watched.
  void set_peers(Peers* peers);
  // This process's answer to another's question about communicator `label`: its rank's status
  // there, or the status of a call it is in elsewhere, or what it does.
  RankStatus status_for(std::string_view label) const;

 private:
  Watchdog() = default;
  void run();

  mutable std::mutex m_;  // the list, the peers and every decision
  std::mutex acting_;     // held while a stall is acted on: forget() waits for it
  std::vector<std::shared_ptr<CommWatch>> watched_;
  Peers* peers_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dpx::parallel
