// The training driver behind `dpx train` and `dpx bench`: builds the data, the model and the
// ranks, runs the steps (single replica, DataParallel or DistributedDataParallel), times every
// phase of every step on every rank, and returns what it saw. It prints progress on rank 0.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

#include "core/data/loader.hpp"
#include "core/phase_timer.hpp"
#include "layers/model.hpp"
#include "parallel/comm/communicator.hpp"
#include "parallel/runtime/launch_info.hpp"
#include "parallel/train/trace_span.hpp"
#include "parallel/train/train_options.hpp"
#include "zoo/registry.hpp"

namespace dpx::parallel {

struct StepRecord {
  int rank = 0;
  int64_t epoch = 0, step = 0;   // step within the epoch
  int64_t global_step = 0;       // across epochs
  double loss = 0;               // this rank's loss on its part of the batch
  StepTimes times;
  int64_t images = 0;            // images this rank processed in the step
  uint64_t comm_bytes = 0;       // bytes this rank sent in the step (counted by the communicator)
  double start_s = 0;            // steady-clock time the step started (for traces), on rank 0's clock
  double backward_end_s = 0;     // steady-clock time backward ended (for the wait phase), on rank 0's clock
  bool optimizer_step = true;    // false on non-final micro-steps of --accumulate
  float loss_scale = 1;          // what the loss gradient was multiplied by (--loss-scale; 1: none)
  bool update_skipped = false;   // inf/NaN gradients skipped the update (loss scaler, --on-nonfinite skip)
  MemoryPeaks memory;            // this rank's high-water marks since the run started, at the step's end
};

struct EpochRecord {
  int64_t epoch = 0;
  double train_loss = 0;         // mean over the epoch's steps (rank 0)
  double test_accuracy = -1;     // -1 when not evaluated
  double test_loss = -1;
  double time_s = 0;             // wall time of the epoch's training steps
  double eval_s = 0;             // wall time of the evaluation
};

struct TrainReport {
  TrainOptions options;
  int ranks = 1;
  int threads_per_rank = 1;
  int64_t num_parameters = 0, num_trainable = 0;
  int64_t train_samples = 0, steps_per_epoch = 0;
  std::vector<StepRecord> steps;     // every rank's steps, in order
  // The traced steps' bucket all-reduces (--trace, DDP over a host backend: threads, mpi).
  std::vector<TraceSpan> trace_spans;
  std::vector<EpochRecord> epochs;
  double wall_s = 0;
  double start_s = 0;                // steady-clock time the run started (trace origin)
  int64_t threshold_step = -1, threshold_epoch = -1;  // first step whose loss < loss_threshold
  // Rank 0's (DataParallel: the master's) model after training, on its device, buffers
  // included (for --save), and what it was built with.
  std::shared_ptr<nn::Model> final_model;
  // A copy of final_model's parameters, made on each call (for equivalence tests). Not kept in
  // the report: a run that copied them at its end held one more set of weights at its memory
  // peak, outside dpx's allocator (VGG-16: 537 MB of resident memory).
  std::vector<float> final_params() const;
  zoo::ModelOptions model_options;
  LaunchInfo launch;                 // how the ranks were started (threads, or MPI processes)
  int stopped_by = 0;                // the signal that stopped the run early (core/stop.hpp); 0: none
  std::string checkpoint;            // the last checkpoint written (rank 0), if any
  data::LoaderStats loader;          // the training loaders of this process's ranks, summed
  // The share of the run's cores that other processes took during the measured steps (rank 0's
  // node; core/cpu_use.hpp); -1 where not measured.
  double other_cpu_share = -1;
};

// Step records in the order every report keeps them: by global step, then rank.
void sort_steps(std::vector<StepRecord>& steps);

struct Job;  // job.hpp: the data sets, the initial model and its weights, built before any rank starts

// Runs a whole training job. Progress lines go to `log` (rank 0 only). With `processes` (an
// MPI communicator, options.process_ranks of its size) this process runs its rank alone, and
// rank 0's report gathers every rank's steps, times on rank 0's clock (launch.clock_offset_s);
// the others' reports hold their own steps only.
// The job's initial model is freed once every rank of this process has its copy: a job trains once.
TrainReport train(Job& job, std::ostream& log, Communicator* processes = nullptr, const LaunchInfo& launch = {});
// Builds the Job (launch.cores_per_rank: an MPI rank's cores), then trains it.
TrainReport train(const TrainOptions& options, std::ostream& log, Communicator* processes = nullptr,
                  const LaunchInfo& launch = {});

}  // namespace dpx::parallel
