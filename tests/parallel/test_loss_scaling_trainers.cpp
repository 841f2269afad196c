// Loss scaling in every trainer: a power-of-two scale multiplies every gradient exactly and is
// taken off exactly before the optimizer, so a run with --loss-scale 1024 (or dynamic, from 2^10,
// where nothing overflows) ends with the same weights, bit for bit, as the run without — one
// replica, DDP, DataParallel, and with gradient accumulation.
#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "parallel/train/trainer.hpp"
#include "tests/parallel/small_job.hpp"

using namespace dpx;
using namespace dpx::parallel;
using dpx::testing::small_job;

TEST_CASE("a power-of-two loss scale changes no bit of the weights in any trainer") {
  std::ostringstream log;
  struct Case {
    const char* devices;
    ParallelMode mode;
    int accumulate;
  };
  for (const Case& c : {Case{"cpu:1", ParallelMode::none, 1}, Case{"cpu:2", ParallelMode::ddp, 1},
                        Case{"cpu:2", ParallelMode::dp, 1}, Case{"cpu:2", ParallelMode::ddp, 2}}) {
    CAPTURE(std::string(c.devices));
    CAPTURE(choice_name(kParallelModes, c.mode));
    CAPTURE(c.accumulate);
    TrainOptions plain = small_job(c.devices, c.mode);
    plain.accumulate = c.accumulate;
    const TrainReport unscaled = train(plain, log);
    for (const std::string scale : {"1024", "dynamic"}) {
      CAPTURE(scale);
      TrainOptions o = plain;
      o.loss_scale = parse_loss_scale(scale);
      o.initial_loss_scale = 1024.f;
      o.loss_scale_window = 4;  // grows to 2^11 and 2^12 within the run: still exact
      const TrainReport scaled = train(o, log);
      CHECK(scaled.final_params() == unscaled.final_params());
      for (const StepRecord& s : scaled.steps) CHECK_FALSE(s.update_skipped);
      CHECK(scaled.steps.front().loss_scale == 1024.f);
      CHECK(unscaled.steps.front().loss_scale == 1.f);
    }
  }
}
