// The device a rank computes on: its Context (on a GPU: a stream with cuBLAS/cuDNN handles),
// the host-to-device copy of each batch, and the timing of device phases. On the CPU phases
// are timed by the host clock; on a GPU, CUDA events recorded at the begin and end of h2d,
// forward, backward and optimizer replace their host times, and the host waits for the device
// once, at the end of the step. PhaseScope is the one way a trainer times a phase: it does both.
#pragma once
#include <memory>
#include <vector>

#include "core/context.hpp"
#include "core/phase_timer.hpp"
#include "core/tensor.hpp"
#include "parallel/train/graph_step.hpp"

namespace dpx::parallel {

enum class Edge { begin, end };

// As it is, the CPU's: host-timed phases, no copies.
class DeviceEnv {
 public:
  explicit DeviceEnv(const Context& ctx = {}) : ctx_(ctx) {}
  virtual ~DeviceEnv() = default;
  Context& ctx() { return ctx_; }
  // The batch on this device (the host tensor itself on the CPU).
  virtual Tensor upload(const Tensor& host) { return host; }
  // The begin or end of a phase, in the order the work is queued (PhaseScope calls it).
  virtual void mark(Phase, Edge) {}
  // A phase whose marks a graph replay recorded (--cuda-graph: the marks made while the step was
  // recorded are event nodes of the graph): read at finish_step as if marked now.
  virtual void replayed(Phase) {}
  // What records a step for --cuda-graph (graph_step.hpp): a CUDA graph on a GPU, the rehearsal
  // on the CPU.
  virtual std::unique_ptr<StepRecorder> make_recorder() { return make_rehearsal_recorder(); }
  // Waits for the step's work and writes the device-timed phases into `times`.
  virtual void finish_step(StepTimes& times) {}
  // Waits until the work queued on this device so far has finished (nothing to wait for on the CPU).
  virtual void synchronize() {}

 protected:
  Context ctx_;
};

// A CPU rank with `threads` threads (the reference kernels with `reference`), or cuda:N in fp32
// math; apply_math (train_options.hpp) then sets what the run asks for (TF32, bf16, determinism).
std::unique_ptr<DeviceEnv> make_device_env(Device device, int threads, bool reference);

// Lets each GPU of `devices` read and write the others' memory directly (DataParallel's peer
// copies), where the hardware allows; elsewhere copies go through the host. No-op without CUDA.
void enable_peer_access(const std::vector<int>& devices);

// Times one phase of a step from construction to destruction: on the host timer (nested scopes
// take their time out of the outer one) and, for the device env, marks of its begin and end.
class PhaseScope {
 public:
  PhaseScope(PhaseTimer& timer, DeviceEnv& env, Phase phase) : host_(timer, phase), env_(env), phase_(phase) {
    env_.mark(phase_, Edge::begin);
  }
  ~PhaseScope() { env_.mark(phase_, Edge::end); }  // then host_ stops
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTimer::Scope host_;
  DeviceEnv& env_;
  Phase phase_;
};

// A step's phases on one device: `auto scope = phases.scope(Phase::forward);` around each.
class StepPhases {
 public:
  explicit StepPhases(DeviceEnv& env) : env_(env) {}
  PhaseScope scope(Phase phase) { return PhaseScope(timer_, env_, phase); }
  // Time measured elsewhere (DDP's all-reduces on its communication thread).
  void add(Phase phase, double seconds) { timer_.add(phase, seconds); }
  // A phase a graph replay timed (DeviceEnv::replayed).
  void replayed(Phase phase) { env_.replayed(phase); }
  // The step's times: the host's, with the device-timed phases replaced (waits for the device).
  StepTimes finish() {
    StepTimes times = timer_.take();
    env_.finish_step(times);
    return times;
  }

 private:
  DeviceEnv& env_;
  PhaseTimer timer_;
};

}  // namespace dpx::parallel
