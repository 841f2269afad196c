// A rank's part in checkpoints (internal to the training loop): which steps are due, and the
// collective save, in which every rank hands its random streams and its new step records to
// rank 0, which writes the file (checkpoint.hpp).
#pragma once
#include <string>
#include <vector>

#include "core/data/loader.hpp"
#include "layers/optim.hpp"
#include "parallel/train/checkpoint.hpp"
#include "parallel/comm/communicator.hpp"
#include "parallel/train/job.hpp"

namespace dpx::parallel {

class RankCheckpoints {
 public:
  // `origin_s`: the run's start on rank 0's clock (a resumed run's is moved back by the time its
  // checkpoint had run), from which the saved record times count.
  RankCheckpoints(const Job& job, int rank, double origin_s);
  bool enabled() const { return !job_.options.checkpoint_dir.empty(); }
  // Called after every update, with the steps run so far: whether a checkpoint is due, every
  // --checkpoint-every steps (at the end of an accumulation group when that falls inside one).
  bool due_after_update(int64_t steps_done);
  // Collective over `comm` (null: one rank). Rank 0 writes the checkpoint of position `at` and
  // returns its path; the others return "". `epochs` is rank 0's finished epochs.
  std::string save(Communicator* comm, nn::Model& model, const nn::Optimizer& optimizer, const RunProgress& at,
                   const std::vector<StepRecord>& mine, const std::vector<EpochRecord>& epochs,
                   const data::DataLoader& loader);

 private:
  const Job& job_;
  const int rank_;
  const double origin_s_;
  int64_t last_update_;              // steps run at the previous update
  size_t saved_ = 0;                 // records of the rank's own list already handed over
  std::vector<StepRecord> records_;  // rank 0: every rank's records saved so far, times from origin_s
};

}  // namespace dpx::parallel
