// CUDA events for timing GPU phases (forward, backward, comm): record on a stream, read the
// elapsed milliseconds later. Reading waits only for the end event, not for the whole device.
#pragma once
#include <cuda_runtime.h>

namespace dpx::cuda {

class Event {
 public:
  // timing=false makes a lighter event for ordering only (cudaEventDisableTiming).
  explicit Event(int device, bool timing = true);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Inside a CUDA graph capture (core/capture.hpp) the record becomes a node of the graph (an
  // external event node: each replay records it, so it times the replay).
  void record(cudaStream_t stream);
  // For ordering only (wait_on by another stream): inside a capture no node but the capture's own
  // dependency, through which the waiting stream joins the capture (a fork or join of streams in
  // a CUDA graph); outside, the same as record.
  void record_order(cudaStream_t stream);
  // Makes `stream` wait on the GPU (not the host) until this event has happened.
  void wait_on(cudaStream_t stream) const;
  void synchronize() const;
  bool done() const;  // true when the work recorded before it has finished
  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = 0;
};

// Milliseconds between two recorded timing events; waits for `end` to complete.
float elapsed_ms(const Event& start, const Event& end);

// Times a stretch of one stream: start() and stop() record events, elapsed_ms() reads them.
class StreamTimer {
 public:
  explicit StreamTimer(int device) : start_(device), stop_(device) {}
  void start(cudaStream_t s) { start_.record(s); }
  void stop(cudaStream_t s) { stop_.record(s); }
  float elapsed_ms() const { return cuda::elapsed_ms(start_, stop_); }

 private:
  Event start_, stop_;
};

}  // namespace dpx::cuda
