// --cuda-graph on a GPU: the CUDA recorder (parallel/train/cuda/graph_recorder.cpp over
// core/cuda/graph.hpp) records a shape's forward, loss, backward and update on its second step
// and replays them from then on. A run so made must give the eager run's losses and weights: the step
// logic around the recorder is tested on the CPU with the rehearsal recorder
// (tests/parallel/test_graph_step.cpp); this is the graph itself, its memory pool, its input
// copies and its replay counter for random ops. Both runs are --deterministic, so the same
// kernels run on the same data in the same order; the comparison still allows 1e-6 relative, in
// case a library picks another kernel under capture. Written without a GPU at hand: run by
// scripts/gpu.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "parallel/train/trainer.hpp"
#include "tests/common/compare.hpp"
#include "tests/parallel/small_job.hpp"

using namespace dpx;
using namespace dpx::parallel;

namespace {

TrainReport run(TrainOptions o, bool graph) {
  o.deterministic = true;
  o.cuda_graph = graph;
  std::ostringstream log;
  return train(o, log);
}

void check_same_run(const TrainReport& graph, const TrainReport& eager) {
  REQUIRE(graph.steps.size() == eager.steps.size());
  for (size_t i = 0; i < eager.steps.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(graph.steps[i].loss - eager.steps[i].loss) <= 1e-6 * std::abs(eager.steps[i].loss));
  }
  const std::vector<float> got = graph.final_params(), want = eager.final_params();  // copied off the GPU once
  dpx::testing::check_close(got, want, 1e-6, /*floor=*/1e-3);
  MESSAGE("weights bit for bit: " << (got == want ? "yes" : "no"));
}

}  // namespace

TEST_CASE("--cuda-graph on cuda:0 gives the eager run's losses and weights") {
  SUBCASE("the MLP, one shape, 10 steps: 1 eager, 1 recorded, 8 replayed; SGD and AdamW recorded") {
    TrainOptions o = dpx::testing::small_job("cuda:0", ParallelMode::none);
    check_same_run(run(o, true), run(o, false));
    o.optimizer = "adamw";  // its bias corrections change every step: staged on the device before each replay
    o.lr = 2e-3f;
    check_same_run(run(o, true), run(o, false));
  }
  SUBCASE("--on-nonfinite skip: the recorded update skips itself on the device") {
    TrainOptions o = dpx::testing::small_job("cuda:0", ParallelMode::none);
    o.lr = 1e30f;  // the first (eager) update diverges; the recorded ones are all skipped
    o.on_nonfinite = NonFinite::skip;
    const TrainReport eager = run(o, false), graph = run(o, true);
    REQUIRE(graph.steps.size() == eager.steps.size());
    for (size_t i = 0; i < eager.steps.size(); ++i)
      CHECK(graph.steps[i].update_skipped == eager.steps[i].update_skipped);
    CHECK(graph.steps.back().update_skipped);
    CHECK(graph.final_params() == eager.final_params());  // the skipped updates wrote nothing
  }
  SUBCASE("resnet18: batch norm, residuals, --accumulate 2, evaluation between epochs") {
    TrainOptions o = dpx::testing::small_job("cuda:0", ParallelMode::none);
    o.model = "resnet18";
    o.channels = 3;
    o.image_size = 32;
    o.synthetic_size = 128;  // 4 batches of 32
    o.batch_size = 32;
    o.max_steps = 0;
    o.epochs = 2;
    o.accumulate = 2;
    o.evaluate = true;  // eval-mode forwards between epochs, then back to the recorded train step
    const TrainReport eager = run(o, false), graph = run(o, true);
    check_same_run(graph, eager);
    CHECK(graph.epochs.back().test_accuracy == eager.epochs.back().test_accuracy);
  }
  SUBCASE("efficientnet_b0: dropout and stochastic depth draw each replay's own masks") {
    const TrainOptions o = dpx::testing::random_layers_job("cuda:0");
    check_same_run(run(o, true), run(o, false));
  }
}
