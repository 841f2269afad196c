// --cuda-graph: a rank's forward, loss, backward and DDP's gradient all-reduces recorded once per
// input shape and replayed each step with one launch, where eager launches cost more than the
// kernels (small or launch-bound models: squeezenet1_1's step is 303 kernels).
//
// What is recorded and what stays eager (train_step.cpp):
//   step 1 of a shape      eager, as without the flag: cuDNN's choices, workspaces and the
//                          gradient buffers are made here, outside any capture;
//   step 2 of the shape    the batch is copied into the shape's own input tensors, forward, the
//                          loss and backward are recorded (StepRecorder::capture), then replayed;
//   later steps            the copy, then a replay.
// Under DDP (nccl) the recording holds the Reducer's all-reduces too: backward's hooks start each
// bucket's NCCL call on the communicator's stream, which waits for the bucket's gradients there
// (the graph forks), and the compute stream waits for every call before the widening (it joins);
// GradSync::record_finish. A step that does not synchronise (--accumulate) is a shape of its own.
// The optimizer, the loss's message and every host read stay eager, after the replay: the
// learning rate changes each step (a recorded kernel would keep the one it saw), and a host read
// cannot be recorded (core/capture.hpp). The divergence guard's check of the loss is recorded on
// the device (ops::poison_if_nonfinite), before backward as in the eager step, so a bad loss on one
// rank reaches every rank through the all-reduce. The tensors the recording wrote (the loss, the
// activations) come from the graph's own memory pool and are the same at every replay.
//
// Phase times: forward, backward and comm_exposed are timed by the events recorded inside the
// graph (external event nodes, core/cuda/event.cpp), so they stay apart; h2d is the copy into the
// graph's inputs. Each NCCL call's own start and end events are nodes too: after a replay the
// Reducer waits for them on the host (the watchdog times that wait) and reads comm_total.
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
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "parallel/comm/work.hpp"

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

// A rank's recorded steps, one per input shape (the last batch of an epoch may be smaller) and,
// under DDP, per whether the step all-reduces.
class GraphSteps {
 public:
  using MakeRecorder = std::function<std::unique_ptr<StepRecorder>()>;
  // `counter`: one i64 zero on the rank's device (the replay count random ops add to their stream).
  GraphSteps(MakeRecorder make, Tensor counter);

  struct Shape {
    std::unique_ptr<StepRecorder> recorder;  // null until the shape's second step
    Tensor images, labels;                   // the graph's inputs: each step's batch is copied here
    Tensor loss;                             // what the recorded loss writes
    std::vector<Work> calls;                 // the recorded collectives (DDP), which each replay runs
    int64_t steps = 0;                       // steps of this shape so far
    bool exchange = false;                   // its steps all-reduce (DDP, not an --accumulate micro-step)
  };

  // The entry of a batch of `images_shape` whose step all-reduces (`exchange`) or not, counting
  // this step. Its `steps` is 1 on the shape's first step (run it eagerly), 2 on the step to
  // record, more on replays.
  Shape& step_of(const std::vector<int64_t>& images_shape, bool exchange = false);
  std::unique_ptr<StepRecorder> make_recorder() const { return make_(); }
  // The replay counter (Context::random_offset while recording).
  Tensor& counter() { return counter_; }
  size_t recorded() const;  // shapes recorded so far

 private:
  MakeRecorder make_;
  Tensor counter_;
  std::map<std::pair<std::vector<int64_t>, bool>, Shape> shapes_;
};

// The CPU's rehearsal recorder (see above).
std::unique_ptr<StepRecorder> make_rehearsal_recorder();

}  // namespace dpx::parallel
