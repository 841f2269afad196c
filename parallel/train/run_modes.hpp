// The ways a job runs its ranks (internal to parallel/): SPMD (single replica, or one replica
// per rank with DistributedDataParallel) and DataParallel's master over its replicas; both run
// train_loop and train_step (train_step.hpp).
#pragma once
#include <functional>

#include "parallel/train/job.hpp"
#include "parallel/train/trainer.hpp"

namespace dpx::parallel {

struct TrainHooks {
  std::function<void(const StepRecord&, bool last_of_epoch)> on_step;  // rank 0's steps
  std::function<void(const EpochRecord&)> on_epoch;
  std::function<void(const std::string& path)> on_checkpoint;         // rank 0, after writing one
};

// With `processes`, this process runs its one rank of an MPI job (see train()).
// Both free the job's initial model once this process's replicas have their copies (Job::copy_initial).
void run_spmd(Job& job, TrainReport& report, const TrainHooks& hooks, Communicator* processes);
void run_data_parallel(Job& job, TrainReport& report, const TrainHooks& hooks);

// Rank 0 receives every rank's step records (appended to its own); the others send theirs.
void gather_steps(Communicator& comm, std::vector<StepRecord>& steps);
// The same for any records that travel as bytes (TraceSpan).
template <class Record>
void gather_records(Communicator& comm, std::vector<Record>& records);

}  // namespace dpx::parallel
