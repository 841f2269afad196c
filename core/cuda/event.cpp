// CUDA event wrapper: events are created on their device and destroyed without throwing.
#include "core/cuda/event.hpp"

#include <utility>

#include "core/capture.hpp"
#include "core/cuda/check.hpp"
#include "core/cuda/device_guard.hpp"

namespace dpx::cuda {

Event::Event(int device, bool timing) : device_(device) {
  DeviceGuard guard(device);
  DPX_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Event::record(cudaStream_t stream) {
  DeviceGuard guard(device_);
  // While the step is captured into a CUDA graph, an external event node: each replay records
  // the event, so phase times are read after a replay as after an eager step.
  if (capture::active())
    DPX_CUDA_CHECK(cudaEventRecordWithFlags(event_, stream, cudaEventRecordExternal));
  else
    DPX_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::record_order(cudaStream_t stream) {
  DeviceGuard guard(device_);
  DPX_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::wait_on(cudaStream_t stream) const {
  DPX_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void Event::synchronize() const { DPX_CUDA_CHECK(cudaEventSynchronize(event_)); }

bool Event::done() const {
  cudaError_t q = cudaEventQuery(event_);
  if (q == cudaErrorNotReady) return false;
  DPX_CUDA_CHECK(q);
  return true;
}

float elapsed_ms(const Event& start, const Event& end) {
  end.synchronize();
  float ms = 0.f;
  DPX_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), end.get()));
  return ms;
}

}  // namespace dpx::cuda
