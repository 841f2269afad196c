// One training step of one rank, and the epoch loop around it, shared by every trainer: the
// single replica and DistributedDataParallel (SPMD: every rank runs them, spmd.cpp) and
// DataParallel (one master over its replicas, data_parallel.cpp). The trainers differ only in
// how the logits and the gradients are produced (StepModel) and reduced (GradSync).
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "core/data/loader.hpp"
#include "layers/loss.hpp"
#include "layers/optim.hpp"
#include "parallel/train/device_env.hpp"
#include "parallel/train/grad_sync.hpp"
#include "parallel/train/job.hpp"
#include "parallel/train/loss_scaler.hpp"
#include "parallel/train/trainer.hpp"

namespace dpx::parallel {

struct TrainHooks {
  std::function<void(const StepRecord&, bool last_of_epoch)> on_step;  // rank 0's steps
  std::function<void(const EpochRecord&)> on_epoch;
  std::function<void(const std::string& path)> on_checkpoint;         // rank 0, after writing one
};

// How a step turns the batch into logits and the loss gradient into gradients on the model the
// optimizer updates. An SPMD rank runs its own replica (LocalReplica); DataParallel's master
// scatters the batch over its replicas and runs them in parallel (data_parallel.cpp).
class StepModel {
 public:
  virtual ~StepModel() = default;
  // The model the optimizer updates, evaluates and checkpoints (DataParallel: the master).
  virtual nn::Model& master() = 0;
  virtual void train() { master().train(); }
  virtual Tensor forward(Context& ctx, const Tensor& images, StepPhases& phases) = 0;
  virtual void backward(Context& ctx, const Tensor& dlogits, StepPhases& phases) = 0;
  // The step's records, made from the rank's record of the whole step: that record itself, or
  // DataParallel's one per replica.
  virtual std::vector<StepRecord> records(const StepRecord& step) { return {step}; }
};

class LocalReplica final : public StepModel {
 public:
  explicit LocalReplica(nn::Model& model) : model_(model) {}
  nn::Model& master() override { return model_; }
  Tensor forward(Context& ctx, const Tensor& images, StepPhases&) override { return model_.forward(ctx, images); }
  void backward(Context& ctx, const Tensor& dlogits, StepPhases&) override { model_.backward(ctx, dlogits); }

 private:
  nn::Model& model_;
};

// What one rank trains with. The objects belong to the caller and outlive the loop.
struct Rank {
  Rank(const Job& job, int rank, DeviceEnv& env, StepModel& model, GradSync& grad_sync, nn::Optimizer& optimizer,
       data::DataLoader& loader, double clock_offset_s = 0);
  double clock() const;            // rank 0's clock: this rank's steady clock minus clock_offset_s

  const Job& job;
  const int rank;                  // DataParallel: 0, the master
  DeviceEnv& env;
  StepModel& model;
  GradSync& grad_sync;
  nn::Optimizer& optimizer;
  data::DataLoader& loader;
  const double clock_offset_s;
  nn::CrossEntropyLoss criterion;
  std::optional<double> bad_loss;  // this rank's non-finite loss in the accumulation group
  std::optional<LossScaler> scaler;  // --loss-scale: the same on every rank, as their gradients
  GraphSteps* graphs = nullptr;      // --cuda-graph: the recorded steps (graph_step.hpp); null: eager
  std::vector<TraceSpan>* trace = nullptr;  // a traced step's spans (train_step adds its batch's); null: untraced
};

struct StepAt {
  int64_t epoch = 0, step = 0, global_step = 0;
};

// One step (one micro-step of --accumulate) of one rank: load, h2d, forward, loss, backward
// with the gradients reduced, and the optimizer on the last micro-step. Returns its records.
std::vector<StepRecord> train_step(Rank& r, const StepAt& at);

// The whole run of one rank (`host` for its votes, barriers and checkpoints, `data` for its
// gradients; both null for one rank alone): the epochs' steps, evaluation, checkpoints, resuming
// and stopping on a signal. Appends the rank's records to the report; rank 0 also leaves its
// model and how the run stopped.
void train_loop(Rank& r, Communicator* host, Communicator* data, TrainReport& report, std::mutex& report_mu,
                const TrainHooks& hooks);

// The trainers, each running train_loop on its ranks: SPMD (spmd.cpp; with `processes`, this
// process runs its one rank of an MPI job, see train()) and DataParallel's master over its
// replicas (data_parallel.cpp). Both free the job's initial model once this process's replicas
// have their copies (Job::copy_initial).
void run_spmd(Job& job, TrainReport& report, const TrainHooks& hooks, Communicator* processes);
void run_data_parallel(Job& job, TrainReport& report, const TrainHooks& hooks);

}  // namespace dpx::parallel
