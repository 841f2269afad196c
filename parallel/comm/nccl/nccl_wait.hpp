// How the nccl backend decides, while it waits for NCCL, whether to go on waiting: a pure
// function of what one poll saw (the stream, ncclCommGetAsyncError) and how long the wait has
// lasted, kept free of CUDA so the CPU tests check it. nccl/cuda/nccl_backend.cpp waits for new
// communicators with it, past --comm-timeout giving up; nccl/cuda/nccl_comm.cpp waits for queued
// calls with it and no timeout, as the process's watchdog times those waits.
#pragma once

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

}  // namespace dpx::parallel::nccl
