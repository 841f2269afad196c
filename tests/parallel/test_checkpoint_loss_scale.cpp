// Checkpoints and mixed precision: the dynamic loss scale and each step's scale and skip travel
// through a checkpoint; a checkpoint of an older dpx (step records without those columns, options
// without --grad-dtype and the loss-scaling flags) still reads, as the defaults it ran with.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.hpp"
#include "parallel/train/checkpoint.hpp"
#include "tests/common/files.hpp"

using namespace dpx;
using namespace dpx::parallel;
using dpx::testing::TempDir;

namespace {

Checkpoint small_checkpoint(const TrainOptions& o) {
  Checkpoint c;
  c.options = o.flag_values();
  c.progress = {.epoch = 0, .step = 2, .global_step = 2, .loss_scale = 4096.f, .loss_scale_good_updates = 1};
  c.model["w"] = Tensor::from({2}, {1.f, 2.f});
  c.random = {RandomStreams{{"drop", nn::RandomState{1, 2, 3}}}};
  c.order = {1, 0, 2, 3};
  StepRecord skipped, taken;
  skipped.loss_scale = 8192.f;
  skipped.update_skipped = true;
  taken.global_step = 1;
  taken.loss_scale = 4096.f;
  c.steps = {skipped, taken};
  return c;
}

}  // namespace

TEST_CASE("a checkpoint keeps the dynamic loss scale and each step's scale and skip") {
  const TempDir tmp("checkpoint_loss_scale");
  TrainOptions o;
  o.parallel = ParallelMode::ddp;
  o.grad_dtype = DType::f16;
  const Checkpoint c = read_checkpoint(write_checkpoint(tmp.path.string(), small_checkpoint(o), 3));
  CHECK(c.progress.loss_scale == 4096.f);
  CHECK(c.progress.loss_scale_good_updates == 1);
  REQUIRE(c.steps.size() == 2);
  CHECK(c.steps[0].loss_scale == 8192.f);
  CHECK(c.steps[0].update_skipped);
  CHECK(c.steps[1].loss_scale == 4096.f);
  CHECK_FALSE(c.steps[1].update_skipped);
  CHECK(resume_mismatch(c, o, 1).empty());
  TrainOptions bf16 = o;
  bf16.grad_dtype = DType::bf16;
  CHECK(resume_mismatch(c, bf16, 1) == "--grad-dtype is fp16 in the checkpoint and bf16 here");
}

TEST_CASE("a checkpoint of an older dpx, without the mixed-precision columns and flags, reads as their defaults") {
  const TempDir tmp("checkpoint_older");
  const TrainOptions o;
  const std::string path = write_checkpoint(tmp.path.string(), small_checkpoint(o), 3);
  // Rewrite it as an older dpx wrote it: 19 record columns, no new flags or progress fields.
  SafeTensors st = read_safetensors(path);
  auto columns = nlohmann::json::parse(st.metadata.at("record_columns")).get<std::vector<std::string>>();
  REQUIRE(columns.size() == 21);
  REQUIRE(columns.back() == "update_skipped");
  columns.resize(19);
  st.metadata["record_columns"] = nlohmann::json(columns).dump();
  auto options = nlohmann::json::parse(st.metadata.at("options"));
  for (const char* flag : {"--grad-dtype", "--loss-scale", "--initial-loss-scale", "--loss-scale-window",
                           "--precision"})
    options.erase(flag);
  st.metadata["options"] = options.dump();
  auto progress = nlohmann::json::parse(st.metadata.at("progress"));
  progress.erase("loss_scale");
  progress.erase("loss_scale_good_updates");
  st.metadata["progress"] = progress.dump();
  for (auto& [name, t] : st.tensors) {
    if (name != "records") continue;
    Tensor older = Tensor::empty({t.size(0), 19}, DType::f64);
    for (int64_t r = 0; r < t.size(0); ++r)
      for (int64_t k = 0; k < 19; ++k) older.data<double>()[r * 19 + k] = t.data<double>()[r * 21 + k];
    t = older;
  }
  write_safetensors(path, st.tensors, st.metadata);
  const Checkpoint c = read_checkpoint(path);
  CHECK(c.progress.loss_scale == 0);
  REQUIRE(c.steps.size() == 2);
  CHECK(c.steps[0].loss_scale == 1.f);
  CHECK_FALSE(c.steps[0].update_skipped);
  CHECK(resume_mismatch(c, o, 1).empty());
  TrainOptions fp16 = o;
  fp16.grad_dtype = DType::f16;
  CHECK(resume_mismatch(c, fp16, 1) == "--grad-dtype is fp32 in the checkpoint and fp16 here");
}
