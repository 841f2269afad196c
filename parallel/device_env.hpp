// The device a rank computes on: its Context (on a GPU: a stream with cuBLAS/cuDNN handles),
// the host-to-device copy of each batch, and the timing of device phases. On the CPU phases
// are timed by the host clock; on a GPU, CUDA events recorded at the phase boundaries replace
// the host times of h2d, forward, backward and optimizer, and the host waits for the device
// once, at the end of the step.
#pragma once
#include <memory>

#include "core/context.hpp"
#include "core/phase_timer.hpp"
#include "core/tensor.hpp"

namespace dpx::parallel {

// Phase boundaries a rank marks in each step, in this order.
enum class Boundary { h2d_begin, forward_begin, backward_begin, backward_end, optimizer_begin, optimizer_end };

class DeviceEnv {
 public:
  virtual ~DeviceEnv() = default;
  Context& ctx() { return ctx_; }
  // The batch on this device (the host tensor itself on the CPU).
  virtual Tensor upload(const Tensor& host) { return host; }
  virtual void mark(Boundary) {}
  // Waits for the step's work and writes the device-timed phases into `times`.
  virtual void finish_step(StepTimes& times) {}

 protected:
  Context ctx_;
};

// A CPU rank with `threads` threads, or cuda:N (TF32 math only when allow_tf32).
std::unique_ptr<DeviceEnv> make_device_env(Device device, int threads, bool allow_tf32);

}  // namespace dpx::parallel
