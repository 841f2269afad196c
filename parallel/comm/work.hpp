// Work: a collective that was started and may not have finished yet, as PyTorch's c10d::Work.
// wait() returns once it has: its results are in place and its buffers may be reused; an error,
// or the stall report of a timeout, is thrown from there. The host backends (threads, mpi, p2p)
// finish a Work on their communicator's communication thread (communicator.cpp); the nccl backend
// with a CUDA event recorded on its stream after the call (nccl/cuda/nccl_comm.cpp).
#pragma once
#include <cstdint>
#include <memory>

namespace dpx::parallel {

class Work {
 public:
  // What a backend provides.
  class State {
   public:
    virtual ~State() = default;
    virtual void wait() = 0;                 // blocks until finished; throws the call's error
    virtual bool done() const = 0;           // finished (without blocking)
    virtual double seconds() const = 0;      // after wait(): how long the collective itself took
    virtual uint64_t bytes_sent() const = 0; // after wait(): what this rank sent for it
    // After wait(): the steady clock (core/clock.hpp) when the collective began (nccl: its GPU
    // start, read against an event the host saw happen); 0 where a backend cannot say.
    virtual double started_s() const { return 0; }
  };

  Work() = default;  // nothing in flight
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

  void wait() const {
    if (state_) state_->wait();
  }
  bool done() const { return !state_ || state_->done(); }
  double seconds() const { return state_ ? state_->seconds() : 0; }
  uint64_t bytes_sent() const { return state_ ? state_->bytes_sent() : 0; }
  double started_s() const { return state_ ? state_->started_s() : 0; }
  // Whether a call was started (a default Work is none).
  bool started() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

}  // namespace dpx::parallel
