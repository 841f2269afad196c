// What every rank of a training job shares: the options, the data sets, the initial model
// (built once from the seed, then copied to each rank), and the thread budget per rank.
#pragma once
#include <memory>
#include <mutex>

#include "core/data/dataset.hpp"
#include "core/data/datasets.hpp"
#include "core/data/loader.hpp"
#include "kernels/ops.hpp"
#include "layers/model.hpp"
#include "layers/optim.hpp"
#include "parallel/train/checkpoint.hpp"
#include "parallel/train/train_options.hpp"
#include "zoo/registry.hpp"
#include "zoo/weights.hpp"

namespace dpx::parallel {

struct Job {
  // process_cores: under MPI, the CPUs of this process's rank when --threads is not given.
  explicit Job(const TrainOptions& options, int process_cores = 0);

  TrainOptions options;
  int ranks = 1;
  int threads_per_rank = 1;
  int64_t rank_batch = 0;  // the batch one rank (one replica) processes per step
  std::shared_ptr<const data::Dataset> train_set, test_set;  // test_set may be null
  nn::Model initial;      // on the host; every rank starts from a copy (copy_initial)
  zoo::ModelOptions model_options;  // what `initial` was built with
  zoo::LoadReport weights_report;   // what --weights loaded into it
  int64_t steps_per_epoch = 0;
  // The checkpoint a resumed run continues from (options.resume), checked against the options;
  // `initial` already holds its weights and buffers.
  std::shared_ptr<const Checkpoint> resume;

  // What the options ask of the data set.
  static data::DatasetSpec data_spec(const TrainOptions& options);
  // Whether the run fits its data and model, without building the model (dpx bench checks every
  // configuration this way before it runs any): the model's name and smallest input, the batch
  // against the data set, --warmup against the steps. Returns the steps per epoch; throws
  // dpx::UsageError saying what to change.
  static int64_t check_fits(const TrainOptions& options, const data::Dataset& train_set);

  // A copy of `initial` on `device`, with a gradient buffer, for one of the `copies` replicas
  // this process starts from it. The last of them frees `initial` after its copy: nothing reads it
  // again, and it lived beside every replica through the run (VGG-16: 0.55 GB of a 2.9 GB step at
  // batch 8). Thread-safe: the thread ranks call it at once.
  nn::Model copy_initial(Device device, int copies);

  // The optimiser the options ask for (lr of step 0), over `model`, which must outlive it.
  std::unique_ptr<nn::Optimizer> make_optimizer(nn::Model& model) const;
  ops::SgdParams sgd_params() const;
  ops::AdamwParams adamw_params() const;
  // The training loader of one rank of `world`, `batch` samples a step, shuffled per epoch.
  data::LoaderOptions train_loader(int rank, int world, int64_t batch) const;

 private:
  std::mutex copies_mu_;
  int copies_made_ = 0;
};

}  // namespace dpx::parallel
