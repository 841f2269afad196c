// Checkpoints: everything a bit-exact resume needs, one safetensors file per checkpoint —
// rank 0's weights and buffers, the optimizer's state, every rank's random streams, the loader's
// order for the epoch in progress and the position in it, the run's progress (with the dynamic
// loss scale), its step and epoch records so far, and the options (to refuse a resume that does
// not fit) — written atomically by rank 0 into --checkpoint-dir as
// checkpoint-<next global step>.safetensors, the last --keep kept.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.hpp"
#include "core/tensor.hpp"
#include "layers/model.hpp"
#include "parallel/train/train_options.hpp"
#include "parallel/train/trainer.hpp"

namespace dpx::parallel {

// Where a run stands: the next step it would run.
struct RunProgress {
  int64_t epoch = 0;
  int64_t step = 0;            // within the epoch; == steps per epoch: trained, not yet evaluated
  int64_t global_step = 0;
  double epoch_loss_sum = 0;   // rank 0's losses of the epoch's steps so far
  double elapsed_s = 0;        // wall time of the run up to the checkpoint
  // Dynamic loss scaling's state (loss_scaler.hpp): the scale and its good updates in a row; 0: none.
  float loss_scale = 0;
  int64_t loss_scale_good_updates = 0;
};

// A rank's random streams: one per layer that draws (Dropout, StochasticDepth), by name.
using RandomStreams = std::vector<std::pair<std::string, nn::RandomState>>;
RandomStreams random_streams(nn::Model& model);
// Sets them back; throws a dpx::Error naming a layer the model does not have.
void set_random_streams(nn::Model& model, const RandomStreams& streams);

struct Checkpoint {
  std::string path;                                   // where it was read from, or written to
  std::vector<std::pair<std::string, std::string>> options;  // TrainOptions::flag_values()
  int ranks = 1;
  RunProgress progress;
  std::map<std::string, Tensor> model;                // state_dict: parameters and buffers (host)
  std::map<std::string, Tensor> optimizer;            // nn::Optimizer::state()
  std::vector<RandomStreams> random;                  // per rank
  std::vector<int64_t> order;                         // the data set's order in progress.epoch
  std::vector<StepRecord> steps;                      // every rank's steps so far; times from the run's start
  std::vector<EpochRecord> epochs;                    // the epochs finished so far
};

// Writes `c` as dir/checkpoint-<global step>.safetensors (atomically, the folder fsynced), then
// removes all but the `keep` newest checkpoints there. Returns the path.
std::string write_checkpoint(const std::string& dir, const Checkpoint& c, int keep);
// The checkpoint a decoded safetensors file holds, every field range-checked (`path` names it in
// the errors): what read_checkpoint does after reading the file, and what
// tests/fuzz/fuzz_checkpoint.cpp feeds any bytes to.
Checkpoint checkpoint_from(const SafeTensors& st, const std::string& path);
// Reads a checkpoint file, or the newest one in a folder. Throws a dpx::Error naming the file
// and what is wrong (or a dpx::UsageError when there is none), saying it is --resume's.
Checkpoint read_checkpoint(const std::string& file_or_dir);
// Whether `dir` holds a dpx checkpoint that read_checkpoint(dir) would read (--resume auto).
bool has_checkpoint(const std::string& dir);
// The options (and number of ranks) a resume must share with its checkpoint, and the first that
// differ, as "--model is resnet18 in the checkpoint and lenet5 here"; empty when it fits.
std::string resume_mismatch(const Checkpoint& c, const TrainOptions& options, int ranks);

}  // namespace dpx::parallel
