// --cuda-graph: a rank's forward, loss and backward recorded once per input shape and replayed
// each step with one launch, where eager launches cost more than the kernels (small or
// launch-bound models: squeezenet1_1's step is 303 kernels).
//
// What is recorded and what stays eager (train_step.cpp):
//   step 1 of a shape      eager, as without the flag: cuDNN's choices, workspaces and the
//                          gradient buffers are made here, outside any capture;
//   step 2 of the shape    the batch is copied into the shape's own input tensors, forward, the
//                          loss and backward are recorded (StepRecorder::capture), then replayed;
//   later steps            the copy, then a replay.
// The optimizer, the loss's check (--on-nonfinite) and every host read stay eager, after the
// replay: the learning rate changes each step (a recorded kernel would keep the one it saw), and a
// host read cannot be recorded (core/capture.hpp). The tensors the recording wrote (the loss, the
// activations) come from the graph's own memory pool and are the same at every replay.
//
// Phase times: forward and backward are timed by the events recorded inside the graph (external
// event nodes, core/cuda/event.cpp), so they stay apart; h2d is the copy into the graph's inputs.
//
// The recorder is the device's: a CUDA graph on a GPU (cuda/graph_recorder.cpp); on the CPU a
// rehearsal that keeps the work and re-runs it under a capture::Scope at each replay, so the CPU
// tests run this logic, and a host read in the recorded work fails there as it would on the GPU.
// The CPU's is for tests only: --cuda-graph on CPU ranks is refused (train_options.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/tensor.hpp"

namespace dpx::parallel {

class StepPhases;  // device_env.hpp

// The step's recordable part, given the phases to mark (forward, backward).
using RecordedWork = std::function<void(StepPhases&)>;

class StepRecorder {
 public:
  virtual ~StepRecorder() = default;
  // Records `work` on the rank's stream without running it (on the CPU: keeps it).
  virtual void capture(const RecordedWork& work, StepPhases& phases) = 0;
  // Runs what was recorded once, and tells `phases` that the recorded marks happened.
  virtual void replay(StepPhases& phases) = 0;
  // Nodes in the recorded graph (kernels, copies, memsets, event records); 0 on the CPU.
  virtual size_t nodes() const = 0;
};

// A rank's recorded steps, one per input shape (the last batch of an epoch may be smaller).
class GraphSteps {
 public:
  using MakeRecorder = std::function<std::unique_ptr<StepRecorder>()>;
  // `counter`: one i64 zero on the rank's device (the replay count random ops add to their stream).
  GraphSteps(MakeRecorder make, Tensor counter);

  struct Shape {
    std::unique_ptr<StepRecorder> recorder;  // null until the shape's second step
    Tensor images, labels;                   // the graph's inputs: each step's batch is copied here
    Tensor loss;                             // what the recorded loss writes
    int64_t steps = 0;                       // steps of this shape so far
  };

  // The entry of a batch of `images_shape`, counting this step. Its `steps` is 1 on the shape's
  // first step (run it eagerly), 2 on the step to record, more on replays.
  Shape& step_of(const std::vector<int64_t>& images_shape);
  std::unique_ptr<StepRecorder> make_recorder() const { return make_(); }
  // The replay counter (Context::random_offset while recording).
  Tensor& counter() { return counter_; }
  size_t recorded() const;  // shapes recorded so far

 private:
  MakeRecorder make_;
  Tensor counter_;
  std::map<std::vector<int64_t>, Shape> shapes_;
};

// The CPU's rehearsal recorder (see above).
std::unique_ptr<StepRecorder> make_rehearsal_recorder();

}  // namespace dpx::parallel
