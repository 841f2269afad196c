// --cuda-graph's step logic on the CPU (parallel/train/graph_step.hpp), through the rehearsal
// recorder: each shape's first step eager, the second recorded, later ones replayed on the
// shape's own input tensors, with the optimizer and the loss check eager after the replay. A run
// so made must equal the eager run bit for bit; the GPU's recorder differs only in recording a
// CUDA graph (parallel/train/cuda/graph_recorder.cpp; tests/cuda/test_cuda_graph.cpp runs it).
// Random layers draw the eager run's masks: the count of replays replaces their own count.
#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "core/capture.hpp"
#include "core/tensor.hpp"
#include "parallel/train/device_env.hpp"
#include "parallel/train/graph_step.hpp"
#include "tests/parallel/small_job.hpp"

using namespace dpx;
using namespace dpx::parallel;

namespace {

TrainReport run(TrainOptions o) {
  std::ostringstream log;
  return train(o, log);
}

TrainOptions rehearsed(TrainOptions o) {
  o.cuda_graph = true;
  o.graph_rehearsal = true;
  return o;
}

}  // namespace

TEST_CASE("--cuda-graph's step logic gives the eager run's weights bit for bit") {
  SUBCASE("the MLP, one shape") {
    const TrainOptions o = testing::small_job("cpu:1", ParallelMode::none);
    const TrainReport eager = run(o), graph = run(rehearsed(o));
    REQUIRE(graph.steps.size() == eager.steps.size());
    for (size_t i = 0; i < eager.steps.size(); ++i) CHECK(graph.steps[i].loss == eager.steps[i].loss);
    CHECK(graph.final_params() == eager.final_params());
  }
  SUBCASE("resnet18 (batch norm, residuals), --accumulate 2, evaluation between epochs") {
    TrainOptions o = testing::small_job("cpu:1", ParallelMode::none);
    o.model = "resnet18";
    o.channels = 3;
    o.image_size = 16;
    o.synthetic_size = 64;  // 4 batches of 16 (the loader drops a partial last batch)
    o.batch_size = 16;
    o.max_steps = 0;
    o.epochs = 2;
    o.accumulate = 2;
    o.evaluate = true;  // eval-mode forwards between epochs, then back to the recorded train step
    const TrainReport eager = run(o), graph = run(rehearsed(o));
    REQUIRE(graph.steps.size() == 8);
    for (size_t i = 0; i < eager.steps.size(); ++i) CHECK(graph.steps[i].loss == eager.steps[i].loss);
    CHECK(graph.final_params() == eager.final_params());
    CHECK(graph.epochs.back().test_accuracy == eager.epochs.back().test_accuracy);
  }
  SUBCASE("efficientnet_b0: dropout and stochastic depth draw each replay's own masks") {
    const TrainOptions o = testing::random_layers_job("cpu:1");
    const TrainReport eager = run(o), graph = run(rehearsed(o));
    REQUIRE(graph.steps.size() == 4);
    for (size_t i = 0; i < eager.steps.size(); ++i) CHECK(graph.steps[i].loss == eager.steps[i].loss);
    CHECK(graph.final_params() == eager.final_params());
  }
}

TEST_CASE("--cuda-graph: a non-finite loss stops the run at the same step as the eager run") {
  TrainOptions o = testing::small_job("cpu:1", ParallelMode::none);
  o.lr = 1e30f;
  auto error_of = [](const TrainOptions& opts) {
    try {
      (void)run(opts);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string eager = error_of(o), graph = error_of(rehearsed(o));
  CHECK(eager.find("non-finite") != std::string::npos);
  CHECK(graph == eager);
}

TEST_CASE("--cuda-graph: replays run under a capture scope, so a host read in the recorded work fails") {
  GraphSteps graphs([] { return make_rehearsal_recorder(); }, Tensor::zeros({1}, DType::i64));
  GraphSteps::Shape& s = graphs.step_of({2, 3});
  CHECK(s.steps == 1);
  CHECK(graphs.step_of({2, 3}).steps == 2);
  CHECK(graphs.step_of({1, 3}).steps == 1);  // another shape counts apart
  std::unique_ptr<DeviceEnv> env = make_device_env(Device::cpu(), 1, false);
  StepPhases phases(*env);
  Tensor t = Tensor::zeros({1});
  s.recorder = graphs.make_recorder();
  s.recorder->capture([&](StepPhases&) { (void)t.item(); }, phases);
  CHECK(graphs.recorded() == 1);
  CHECK_THROWS_AS(s.recorder->replay(phases), capture::CaptureError);
  CHECK_FALSE(capture::active());
}

TEST_CASE("--cuda-graph: refused where it cannot work, each with its reason") {
  auto error_of = [](void (*change)(TrainOptions&)) {
    TrainOptions o;
    o.batch_size = 8;
    o.cuda_graph = true;
    change(o);
    return testing::usage_error_of([&] { o.validate(); });
  };
  CHECK(error_of([](TrainOptions&) {}).find("--cuda-graph replays a GPU's training step") != std::string::npos);
  // (Thread ranks rehearsing: a GPU backend in a build without CUDA is refused before this rule.)
  CHECK(error_of([](TrainOptions& o) {
          o.devices = "cpu:2";
          o.graph_rehearsal = true;
          o.parallel = ParallelMode::ddp;
        }).find("--parallel none") != std::string::npos);
  CHECK(error_of([](TrainOptions& o) {
          o.devices = "cuda:0";
          o.precision = Precision::fp16;
        }).find("loss scaling") != std::string::npos);
  CHECK(error_of([](TrainOptions& o) { o.devices = "cuda:0"; }).empty());
  CHECK(error_of([](TrainOptions& o) {
          o.devices = "cuda:0";
          o.precision = Precision::bf16;
        }).empty());
}
