// What this process is doing in communication, written by whichever thread communicates (the
// training thread, DDP's communication thread) and read by the watchdog thread, which answers
// other ranks' status requests with it and gives up when a wait outlasts --comm-timeout.
#pragma once
#include <mutex>
#include <string>
#include <string_view>

#include "core/clock.hpp"
#include "parallel/comm/algorithms/algorithms.hpp"

namespace dpx::parallel::mpi {

struct RankSnapshot {
  bool in_call = false;
  CommCall call;
  std::string comm;           // the communicator's label: "world", "ranks 0-3"
  double since_s = now_s();   // the last begin or end of a call
  double wait_since_s = 0;    // in a call: when its current wait began (progress resets it)
  int waiting_for = -1;       // the peer the current exchange waits on (-1: unknown or many)
  std::string activity;       // set_activity's words
  bool finished = false;      // finish() was reached: the job is ending normally
};

class RankState {
 public:
  void begin_call(const std::string& comm, const CommCall& call) {
    std::lock_guard<std::mutex> lock(m_);
    s_.in_call = true;
    s_.call = call;
    s_.comm = comm;
    s_.since_s = s_.wait_since_s = now_s();
    s_.waiting_for = -1;
  }
  void end_call() {
    std::lock_guard<std::mutex> lock(m_);
    s_.in_call = false;
    s_.since_s = now_s();
  }
  // A wait on `peer` (-1: several) begins: the timeout counts from here.
  void waiting(int peer) {
    std::lock_guard<std::mutex> lock(m_);
    s_.wait_since_s = now_s();
    s_.waiting_for = peer;
  }
  void set_activity(std::string_view what) {
    std::lock_guard<std::mutex> lock(m_);
    s_.activity.assign(what);
  }
  void set_finished() {
    std::lock_guard<std::mutex> lock(m_);
    s_.finished = true;
  }
  RankSnapshot snapshot() const {
    std::lock_guard<std::mutex> lock(m_);
    return s_;
  }

 private:
  mutable std::mutex m_;
  RankSnapshot s_;
};

}  // namespace dpx::parallel::mpi
