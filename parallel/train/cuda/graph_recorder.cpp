// --cuda-graph's recorder on a GPU (graph_step.hpp): the step's work captured from the rank's
// stream into a cuda::Graph (core/cuda/graph.hpp: its own memory pool, host reads refused with
// the op's name) and replayed with one cudaGraphLaunch.
#include <memory>

#include "core/cuda/graph.hpp"
#include "parallel/train/device_env.hpp"
#include "parallel/train/graph_step.hpp"

namespace dpx::parallel {

namespace {

class GraphRecorder final : public StepRecorder {
 public:
  GraphRecorder(int device, cuda::Stream stream) : graph_(device, stream) {}

  void capture(const RecordedWork& work, StepPhases& phases) override {
    graph_.begin_capture("--cuda-graph");
    try {
      work(phases);
    } catch (...) {
      graph_.abandon_capture();
      throw;
    }
    graph_.end_capture();
  }

  void replay(StepPhases&) override { graph_.replay(); }
  size_t nodes() const override { return graph_.nodes(); }

 private:
  cuda::Graph graph_;
};

}  // namespace

std::unique_ptr<StepRecorder> make_graph_recorder(int device, cuda::Stream stream) {
  return std::make_unique<GraphRecorder>(device, stream);
}

}  // namespace dpx::parallel
