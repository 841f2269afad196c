// A rank's recorded steps (see graph_step.hpp) and the CPU's rehearsal recorder.
#include "parallel/train/graph_step.hpp"

#include <utility>

#include "core/capture.hpp"
#include "core/error.hpp"
#include "parallel/train/device_env.hpp"

namespace dpx::parallel {

GraphSteps::GraphSteps(MakeRecorder make, Tensor counter) : make_(std::move(make)), counter_(std::move(counter)) {}

GraphSteps::Shape& GraphSteps::step_of(const std::vector<int64_t>& images_shape, bool update) {
  Shape& s = shapes_[{images_shape, update}];
  s.update = update;
  ++s.steps;
  return s;
}

size_t GraphSteps::recorded() const {
  size_t n = 0;
  for (const auto& [shape, s] : shapes_) n += s.recorder != nullptr;
  return n;
}

namespace {

// Keeps the work and re-runs it at each replay under a capture scope: a host read in it throws
// the CaptureError the GPU's capture would end in, and everything else computes as recorded.
class RehearsalRecorder final : public StepRecorder {
 public:
  void capture(const RecordedWork& work, StepPhases&) override {
    DPX_CHECK(!work_, "a step is recorded once");
    work_ = work;
  }
  void replay(StepPhases& phases) override {
    DPX_CHECK(work_ != nullptr, "replay of a step that was not recorded");
    capture::Scope scope("--cuda-graph");
    work_(phases);
  }
  size_t nodes() const override { return 0; }

 private:
  RecordedWork work_;
};

}  // namespace

std::unique_ptr<StepRecorder> make_rehearsal_recorder() { return std::make_unique<RehearsalRecorder>(); }

}  // namespace dpx::parallel
