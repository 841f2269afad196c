// --cuda-graph: a rank's training step recorded once per input shape and replayed each step with
// one launch, where eager launches cost more than the kernels (small or launch-bound models:
// squeezenet1_1's step is 303 kernels). Recorded: forward, the loss, backward, DDP's gradient
// all-reduces and, on a step that ends its accumulation group, the divergence guard's count and
// the optimizer's update.
//
// What is recorded and what stays eager (train_step.cpp):
//   step 1 of a shape      eager, as without the flag: cuDNN's choices, workspaces and the
//                          gradient buffers are made here, outside any capture;
//   step 2 of the shape    the batch is copied into the shape's own input tensors, the step is
//                          recorded (StepRecorder::capture), then replayed;
//   later steps            the copy, then a replay.
// Under DDP (nccl) the recording holds the Reducer's all-reduces too: backward's hooks start each
// bucket's NCCL call on the communicator's stream, which waits for the bucket's gradients there
// (the graph forks), and the compute stream waits for every call before the widening (it joins);
// GradSync::record_finish. Steps that update and --accumulate's micro-steps are recorded apart.
// The update reads what changes from step to step on the device, for a recorded kernel keeps
// every value the host gave it: before each replay the host sets the learning rate and writes
// the update's scalars there (nn::Optimizer::stage); the guard's count of non-finite gradients
// is made on the device (ops::count_nonfinite_into) and the update skips itself where it is not
// zero. After the replay the host reads that count for the guard's decision and message, and
// counts the update (Optimizer::count_step); the gradients' zeroing stays eager. An update is
// recorded once the optimizer's state is the same for every parameter (Optimizer::recordable:
// SGD's momentum started, AdamW's steps alike); until then the shape's update steps run eagerly.
// The guard's check of the loss is recorded too (ops::poison_if_nonfinite), before backward as in
// the eager step, so a bad loss on one rank reaches every rank through the all-reduce. The
// tensors the recording wrote (the loss, the activations) come from the graph's own memory pool
// and are the same at every replay.
//
// Phase times: forward, backward, the optimizer and comm_exposed are timed by the events
// recorded inside the graph (external event nodes, core/cuda/event.cpp), so they stay apart; h2d
// is the copy into the graph's inputs. Each NCCL call's own start and end events are nodes too:
// after a replay the Reducer waits for them on the host (the watchdog times that wait) and reads
// comm_total.
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

// A rank's recorded steps, one per input shape (the last batch of an epoch may be smaller) and
// per whether the step updates.
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
    Tensor nonfinite;                        // the guard's count (i64), which the recorded update reads
    int64_t steps = 0;                       // steps of this shape so far
    bool update = false;                     // its steps update (all-reduce under DDP): not --accumulate's micro-steps
  };

  // The entry of a batch of `images_shape` whose step updates the weights (`update`) or not,
  // counting this step. Its `steps` is 1 on the shape's first step (run it eagerly), 2 on the
  // step to record (or more, where the update waits for Optimizer::recordable), more on replays.
  Shape& step_of(const std::vector<int64_t>& images_shape, bool update = false);
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
