// --cuda-graph's step logic on the CPU (parallel/train/graph_step.hpp), through the rehearsal
// recorder: each shape's first step eager, the second recorded, later ones replayed on the
// shape's own input tensors, the optimizer's update with them, and the guard's decision after the
// replay. A run so made must equal the eager run bit for bit; the GPU's recorder differs only in recording a
// CUDA graph (parallel/train/cuda/graph_recorder.cpp; tests/cuda/test_cuda_graph.cpp runs it).
// Random layers draw the eager run's masks: the count of replays replaces their own count. Under
// DDP the recorded step holds the all-reduces; thread ranks rehearse it against eager DDP and one
// replica.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/capture.hpp"
#include "core/tensor.hpp"
#include "parallel/train/device_env.hpp"
#include "parallel/train/graph_step.hpp"
#include "tests/common/files.hpp"
#include "tests/parallel/small_job.hpp"
#include "zoo/weights.hpp"

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
  SUBCASE("efficientnet_b0 resumed from a checkpoint of a recorded run: the masks go on where they stopped") {
    // The checkpoint's random streams say how many masks each layer has drawn; a recorded step's
    // layers count nothing on the host (the replay count does), so the count must include it.
    TrainOptions o = testing::random_layers_job("cpu:1");
    o.max_steps = 0;
    o.epochs = 2;  // 8 steps
    const TrainReport eager = run(o);
    testing::TempDir dir("graph_resume");
    TrainOptions first = rehearsed(o);
    first.checkpoint_dir = dir.path.string();
    first.checkpoint_every = 4;
    run(first);
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(dir.path)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    REQUIRE(files.size() == 2);  // after steps 4 and 8
    CAPTURE(files.front());
    TrainOptions resumed = rehearsed(o);
    resumed.resume = files.front();
    const TrainReport rest = run(resumed);
    REQUIRE(rest.steps.size() == 8);  // the checkpoint's 4 records and the resumed run's 4
    for (size_t i = 0; i < rest.steps.size(); ++i) {
      CAPTURE(i);
      CHECK(rest.steps[i].loss == eager.steps[i].loss);
    }
    CHECK(rest.final_params() == eager.final_params());
  }
}

// DDP with the recorded step (nccl on GPUs): the Reducer's all-reduces are started by backward's
// hooks inside the recorded work and joined there (GradSync::record_finish); after each replay the
// Reducer waits for the recorded calls and times and counts them (finish_replayed). Thread ranks
// rehearse it here: their calls run again at each replay, where a GPU's graph runs the recorded ones.
TEST_CASE("--cuda-graph under DDP: the recorded step's all-reduces give the eager DDP run bit for bit") {
  auto check_same = [](const TrainReport& graph, const TrainReport& eager) {
    REQUIRE(graph.steps.size() == eager.steps.size());
    for (size_t i = 0; i < eager.steps.size(); ++i) {
      CAPTURE(i);
      CHECK(graph.steps[i].loss == eager.steps[i].loss);
      CHECK(graph.steps[i].comm_bytes == eager.steps[i].comm_bytes);  // counted after each replay
      CHECK((graph.steps[i].times[Phase::comm_total] > 0) == eager.steps[i].optimizer_step);
    }
    CHECK(graph.final_params() == eager.final_params());
  };
  SUBCASE("the MLP over 2 ranks, a bucket per tensor, the gradients all-reduced in f32 and in bf16") {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      CAPTURE(dtype_name(dtype));
      TrainOptions o = testing::small_job("cpu:2", ParallelMode::ddp);
      o.bucket_mb = 0.001;
      o.grad_dtype = dtype;
      o.loss_scale = {LossScale::Kind::none};
      const TrainReport eager = run(o), graph = run(rehearsed(o));
      CHECK(eager.steps.front().comm_bytes > 0);
      check_same(graph, eager);
      if (dtype == DType::f32)  // and, as every parallel feature, one replica on the same global batch
        testing::check_matches_one_replica(graph, run(testing::small_job("cpu:1", ParallelMode::none)));
    }
  }
  SUBCASE("--accumulate 2: the steps that all-reduce and those that do not, recorded apart") {
    TrainOptions o = testing::small_job("cpu:2", ParallelMode::ddp);
    o.accumulate = 2;  // 10 steps: 5 of each kind, each kind's first eager, second recorded
    const TrainReport eager = run(o), graph = run(rehearsed(o));
    REQUIRE(graph.steps.size() == 20);  // 10 steps of 2 ranks
    check_same(graph, eager);
  }
}

TEST_CASE("--cuda-graph: a non-finite loss stops the run at the same step as the eager run") {
  auto error_of = [](const TrainOptions& opts) {
    try {
      (void)run(opts);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // One rank; and DDP over 2 ranks, where the loss gradient is poisoned on the device inside the
  // recorded step, so that the all-reduce carries the NaN to every rank.
  for (const std::string devices : {"cpu:1", "cpu:2"}) {
    CAPTURE(devices);
    TrainOptions o = testing::small_job(devices, devices == "cpu:1" ? ParallelMode::none : ParallelMode::ddp);
    o.lr = 1e30f;
    const std::string eager = error_of(o), graph = error_of(rehearsed(o));
    CHECK(eager.find("non-finite") != std::string::npos);
    CHECK(graph == eager);
  }
  // An infinite loss with finite gradients: the last layer's bias makes class 0 certain (+3e38) and
  // the others impossible (-3e38), so an image of another class has the loss 3e38 - (-3e38) = inf
  // while softmax's gradient (p - one-hot) stays finite. Only the poisoned loss gradient makes the
  // guard stop at step 1, on every rank alike; and with --on-nonfinite skip, skip every update,
  // the replayed ones too (the recorded step poisons on the device).
  const testing::TempDir tmp("graph_inf_loss");
  TrainOptions o = testing::small_job("cpu:2", ParallelMode::ddp);
  {
    Job job(o);
    auto params = job.initial.root().named_parameters();
    Tensor& bias = params.back().second->value;
    REQUIRE(params.back().first.find("bias") != std::string::npos);
    for (int64_t c = 0; c < bias.numel(); ++c) bias.data<float>()[c] = c == 0 ? 3e38f : -3e38f;
    zoo::save_state(tmp.file("certain.safetensors"), job.initial);
  }
  o.weights_file = tmp.file("certain.safetensors");
  for (const ParallelMode mode : {ParallelMode::none, ParallelMode::ddp}) {
    o.parallel = mode;
    o.devices = mode == ParallelMode::none ? "cpu:1" : "cpu:2";
    CAPTURE(o.devices);
    const std::string eager = error_of(o), graph = error_of(rehearsed(o));
    CHECK(eager.find("non-finite loss (inf) and gradients at step 1") != std::string::npos);
    CHECK(graph == eager);
    TrainOptions skip = o;
    skip.on_nonfinite = NonFinite::skip;
    const TrainReport skipped = run(rehearsed(skip));
    REQUIRE(skipped.steps.size() == (mode == ParallelMode::none ? 10u : 20u));
    for (const StepRecord& s : skipped.steps) CHECK(s.update_skipped);
  }
}

// The optimizer's update is part of the recorded step: its learning rate (a cosine schedule
// here, changing every step) and AdamW's bias corrections reach it through a tensor the host
// writes before each replay, and the guard's count of non-finite gradients skips it on the device.
TEST_CASE("--cuda-graph records the update: the schedule's learning rates, AdamW's steps, the guard's skip") {
  auto check_same = [](const TrainReport& graph, const TrainReport& eager) {
    REQUIRE(graph.steps.size() == eager.steps.size());
    for (size_t i = 0; i < eager.steps.size(); ++i) {
      CAPTURE(i);
      CHECK(std::isnan(graph.steps[i].loss) == std::isnan(eager.steps[i].loss));  // diverged: NaN on both
      if (!std::isnan(eager.steps[i].loss)) CHECK(graph.steps[i].loss == eager.steps[i].loss);
      CHECK(graph.steps[i].update_skipped == eager.steps[i].update_skipped);
    }
    CHECK(graph.final_params() == eager.final_params());
  };
  for (const std::string devices : {"cpu:1", "cpu:2"}) {
    CAPTURE(devices);
    const TrainOptions base = testing::small_job(devices, devices == "cpu:1" ? ParallelMode::none : ParallelMode::ddp);
    SUBCASE("SGD with Nesterov momentum, and AdamW") {
      for (const std::string optimizer : {"sgd", "adamw"}) {
        CAPTURE(optimizer);
        TrainOptions o = base;
        o.optimizer = optimizer;
        o.lr = optimizer == "sgd" ? 0.05f : 2e-3f;
        TrainReport graph;
        const std::string said = testing::stderr_of([&] { graph = run(rehearsed(o)); });
        CHECK(said.find(o.parallel == ParallelMode::ddp ? "batch with its gradients' all-reduce and the update"
                                                        : "batch with the update")
              != std::string::npos);
        check_same(graph, run(o));
      }
    }
    SUBCASE("--on-nonfinite skip: the updates the recorded step skips on the device") {
      TrainOptions o = base;
      o.lr = 1e30f;  // the first update diverges; every later step's gradients are non-finite
      o.on_nonfinite = NonFinite::skip;
      const TrainReport eager = run(o), graph = run(rehearsed(o));
      CHECK_FALSE(eager.steps.front().update_skipped);
      CHECK(eager.steps.back().update_skipped);
      check_same(graph, eager);
    }
  }
}

TEST_CASE("--cuda-graph: replays run under a capture scope, so a host read in the recorded work fails") {
  GraphSteps graphs([] { return make_rehearsal_recorder(); }, Tensor::zeros({1}, DType::i64));
  GraphSteps::Shape& s = graphs.step_of({2, 3});
  CHECK(s.steps == 1);
  CHECK(graphs.step_of({2, 3}).steps == 2);
  CHECK(graphs.step_of({1, 3}).steps == 1);  // another shape counts apart
  CHECK(graphs.step_of({2, 3}, true).steps == 1);  // and a step that updates
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
  // (Thread ranks rehearsing: a GPU backend in a build without CUDA is refused before these rules.)
  CHECK(error_of([](TrainOptions& o) {
          o.devices = "cpu:2";
          o.graph_rehearsal = true;
          o.parallel = ParallelMode::dp;
        }).find("--cuda-graph with --parallel dp") != std::string::npos);
  CHECK(error_of([](TrainOptions& o) {
          o.devices = "cpu:2";
          o.graph_rehearsal = true;
          o.parallel = ParallelMode::ddp;
        }).empty());
#ifdef DPX_WITH_CUDA  // (without CUDA, --backend p2p is refused as not built)
  CHECK(error_of([](TrainOptions& o) {
          o.devices = "cuda:0,cuda:0";
          o.backend = Backend::p2p;
          o.parallel = ParallelMode::ddp;
        }).find("--cuda-graph with --backend p2p") != std::string::npos);
  CHECK(error_of([](TrainOptions& o) {
          o.devices = "cuda:0,cuda:1";
          o.backend = Backend::nccl;
          o.algo = Algorithm::nccl;
          o.parallel = ParallelMode::ddp;
        }).empty());
#endif
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
