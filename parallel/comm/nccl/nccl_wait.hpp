// How the nccl backend waits for NCCL: a pure rule for whether to go on waiting, from what one
// poll saw (the stream, ncclCommGetAsyncError) and how long the wait has lasted, and the one loop
// that polls by it, both kept free of CUDA so the CPU tests check them. Every wait of the backend
// runs through poll_until_settled: nccl/cuda/nccl_backend.cpp's for new communicators (past
// --comm-timeout giving up), nccl/cuda/nccl_comm.cpp's for queued calls (no timeout: the
// process's watchdog times those) and for a communicator's finalize before it is destroyed.
#pragma once

#include <chrono>
#include <thread>

#include "core/clock.hpp"

namespace dpx::parallel::nccl {

// One poll of a communicator with work in flight.
struct NcclProbe {
  bool stream_idle = false;       // cudaStreamQuery: everything queued so far has finished
  bool comm_in_progress = false;  // ncclCommGetAsyncError said ncclInProgress (a non-blocking call still runs)
  bool comm_failed = false;       // ncclCommGetAsyncError said anything else but ncclSuccess
  bool stream_failed = false;     // cudaStreamQuery returned an error other than cudaErrorNotReady
};

enum class NcclWaitVerdict {
  done,       // nothing in flight: the caller may go on
  pending,    // poll again
  failed,     // NCCL or CUDA reported an error: abort the communicator and throw
  timed_out,  // longer than --comm-timeout: stall report, ncclCommAbort, throw
};

// An error wins over everything (a failed communicator never completes); then completion (work
// that finished just as the timeout passed is not a stall); then the timeout. A patient wait
// (timeout_s <= 0: a barrier for rank 0's evaluation) never times out.
constexpr NcclWaitVerdict judge_wait(const NcclProbe& p, double waited_s, double timeout_s) {
  if (p.comm_failed || p.stream_failed) return NcclWaitVerdict::failed;
  if (p.stream_idle && !p.comm_in_progress) return NcclWaitVerdict::done;
  if (timeout_s > 0 && waited_s >= timeout_s) return NcclWaitVerdict::timed_out;
  return NcclWaitVerdict::pending;
}

// Seconds to sleep before the next poll: none for the first 100 us (a small collective ends
// within them), then a growing pause up to 1 ms, so a long wait costs little CPU and a timeout is
// still seen within a millisecond of passing.
constexpr double poll_pause_s(double waited_s) {
  if (waited_s < 100e-6) return 0;
  const double pause = waited_s / 16;
  return pause < 1e-3 ? pause : 1e-3;
}

// Polls until judge_wait ends the wait and returns its verdict (never `pending`): `probe()` looks
// once (what NCCL and the stream say now) and may throw to end the wait; between looks it pauses
// by poll_pause_s. (Each wait once had a loop of its own; the finalize's kept re-reading a stale
// ncclInProgress, so every NCCL communicator took 10 s to end and was then aborted.)
template <typename Probe>
NcclWaitVerdict poll_until_settled(Probe&& probe, double timeout_s) {
  const double start = now_s();
  for (;;) {
    const NcclProbe seen = probe();
    const double waited = now_s() - start;
    const NcclWaitVerdict verdict = judge_wait(seen, waited, timeout_s);
    if (verdict != NcclWaitVerdict::pending) return verdict;
    const double pause = poll_pause_s(waited);
    if (pause > 0) std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    else std::this_thread::yield();
  }
}

}  // namespace dpx::parallel::nccl
