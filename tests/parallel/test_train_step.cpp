// The one training step (parallel/train/train_step.hpp): every phase it times marks its begin and end
// for the device env, in the order the work is queued (a GPU env times h2d, forward, backward
// and optimizer by those marks); and the one definition of `wait`, which DDP and DataParallel
// follow alike.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/train/device_env.hpp"
#include "parallel/train/job.hpp"
#include "parallel/bench/metrics.hpp"
#include "parallel/train/train_step.hpp"
#include "parallel/train/trainer.hpp"
#include "tests/parallel/small_job.hpp"

using namespace dpx;
using namespace dpx::parallel;

namespace {

// small_job, shorter: 6 steps over 256 images, the loader on the stepping thread.
TrainOptions tiny(const std::string& devices, ParallelMode mode) {
  TrainOptions o = dpx::testing::small_job(devices, mode);
  o.synthetic_size = 256;
  o.max_steps = 6;
  o.seed = 3;
  o.workers = 0;
  return o;
}

// A CPU env that writes down every mark and every finish_step.
class RecordingEnv final : public DeviceEnv {
 public:
  RecordingEnv() { ctx_ = Context::cpu(1); }
  void mark(Phase p, Edge e) override {
    events.push_back(std::string(phase_name(p)) + (e == Edge::begin ? "+" : "-"));
  }
  void finish_step(StepTimes& times) override {
    events.push_back("finish");
    times[Phase::forward] = 42;  // what a device env's times replace
  }
  std::vector<std::string> events;
};

}  // namespace

TEST_CASE("train_step marks the begin and end of every phase it times, then finishes the step on the device") {
  TrainOptions o = tiny("cpu:1", ParallelMode::none);
  o.accumulate = 2;
  Job job(o);
  RecordingEnv env;
  nn::Model model = job.initial.clone(Device::cpu());
  NoSync sync;
  std::unique_ptr<nn::Optimizer> optimizer = job.make_optimizer(model);
  data::DataLoader loader(job.train_set, job.train_loader(0, 1, job.rank_batch));
  loader.start_epoch(0);
  LocalReplica replica(model);
  Rank r(job, 0, env, replica, sync, *optimizer, loader);
  const std::vector<std::string> compute = {"load+", "load-", "h2d+",      "h2d-",      "forward+",
                                            "forward-", "backward+", "backward-"};

  SUBCASE("a micro-step: no optimizer") {
    const auto records = train_step(r, {0, 0, 0});
    REQUIRE(records.size() == 1);
    CHECK(!records[0].optimizer_step);
    std::vector<std::string> expected = compute;
    expected.push_back("finish");
    CHECK(env.events == expected);
    CHECK(records[0].times[Phase::forward] == 42);
  }
  SUBCASE("the last micro-step: the optimizer too") {
    train_step(r, {0, 0, 0});
    env.events.clear();
    const auto records = train_step(r, {0, 1, 1});
    REQUIRE(records.size() == 1);
    CHECK(records[0].optimizer_step);
    std::vector<std::string> expected = compute;
    expected.insert(expected.end(), {"optimizer+", "optimizer-", "finish"});
    CHECK(env.events == expected);
    CHECK(records[0].times[Phase::step] >= records[0].times[Phase::load] + records[0].times[Phase::backward]);
    CHECK(records[0].backward_end_s >= records[0].start_s);
  }
}

TEST_CASE("wait has one definition: DDP and DataParallel alike, from the ranks' ends of backward") {
  std::ostringstream log;
  for (ParallelMode mode : {ParallelMode::ddp, ParallelMode::dp}) {
    CAPTURE(choice_name(kParallelModes, mode));
    TrainOptions o = tiny("cpu:2", mode);
    o.accumulate = 2;
    const TrainReport report = train(o, log);
    REQUIRE(report.steps.size() == 12);  // 6 steps x 2 ranks (DataParallel: replicas)
    std::map<int64_t, double> latest;
    for (const auto& s : report.steps) {
      CHECK(s.backward_end_s > s.start_s);  // every rank's own end of backward, on the run's clock
      latest[s.global_step] = std::max(latest[s.global_step], s.backward_end_s);
    }
    bool someone_waited = false;
    for (const auto& s : report.steps) {
      CAPTURE(s.global_step);
      CAPTURE(s.rank);
      // The gradients are reduced on every update; DataParallel's master sums its replicas'
      // gradients on every step, micro-steps of --accumulate included.
      const bool reduced = s.optimizer_step || mode == ParallelMode::dp;
      CHECK(s.times[Phase::wait] == (reduced ? latest[s.global_step] - s.backward_end_s : 0.0));
      CHECK(s.times[Phase::wait] >= 0);
      if (s.times[Phase::wait] > 0) someone_waited = true;
    }
    CHECK(someone_waited);
  }
}
