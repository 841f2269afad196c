#include "parallel/job.hpp"

#include <algorithm>
#include <thread>

#include "core/data/datasets.hpp"
#include "core/data/dataset.hpp"
#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "zoo/registry.hpp"
#include "zoo/weights.hpp"

namespace dpx::parallel {

Job::Job(const TrainOptions& o, int process_cores) : options(o) {
  o.validate();
  ranks = o.ranks();
  if (o.process_ranks > 0) {  // one rank in this process: --threads are its own
    threads_per_rank = o.threads > 0 ? o.threads : std::max(1, process_cores);
  } else {
    int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    int total = o.threads > 0 ? o.threads : cores;
    threads_per_rank = std::max(1, total / ranks);
  }
  rank_batch = o.batch_size / ranks;

  data::DatasetSpec spec;
  spec.name = o.dataset;
  spec.dir = o.data_dir;
  spec.image_size = o.image_size;
  spec.channels = o.channels;
  spec.synthetic_size = o.synthetic_size;
  spec.num_classes = o.num_classes;
  spec.seed = o.seed;
  train_set = data::make_dataset(spec, data::Split::train);
  if (o.evaluate) test_set = data::make_dataset(spec, data::Split::test);

  int64_t n = train_set->size();
  int64_t per_rank = n / ranks;
  if (per_rank < rank_batch)
    usage_fail("the training set has ", n, " samples: too few for ", ranks, " rank(s) x a batch of ", rank_batch,
               " per rank; pass a smaller --batch-size or fewer ranks", o.dataset == "synthetic" ? " (or a larger --synthetic-size)" : "");
  steps_per_epoch = per_rank / rank_batch;
  if (o.max_steps > 0) steps_per_epoch = std::min(steps_per_epoch, o.max_steps);

  Shape sample = train_set->sample_shape();  // (C, H, W)
  zoo::ModelOptions mo;
  mo.num_classes = static_cast<int>(train_set->num_classes());
  mo.in_channels = static_cast<int>(sample[0]);
  mo.image_size = static_cast<int>(sample[1]);
  mo.seed = o.seed;
  mo.head = o.head;
  mo.freeze_backbone = o.freeze_backbone;
  model_options = mo;
  initial = nn::Model(zoo::build_model(o.model, mo), Device::cpu());
  if (!o.weights_file.empty()) {
    // A new head (--head) keeps its fresh weights: the file's classifier takes no part.
    const std::string skip = o.head == "default" ? "" : zoo::find_model(o.model).classifier + ".";
    weights_report = zoo::load_state(initial, read_safetensors(o.weights_file), o.weights_strict, skip);
  }
}

std::unique_ptr<nn::Optimizer> Job::make_optimizer(nn::Model& model) const {
  if (options.optimizer == "adamw") return std::make_unique<nn::AdamW>(model, adamw_params());
  DPX_CHECK(options.optimizer == "sgd", "unknown optimizer '", options.optimizer, "'");
  return std::make_unique<nn::SGD>(model, sgd_params());
}

ops::SgdParams Job::sgd_params() const {
  ops::SgdParams p;
  p.lr = options.effective_lr();
  p.momentum = options.momentum;
  p.weight_decay = options.effective_weight_decay();
  p.nesterov = options.nesterov;
  return p;
}

ops::AdamwParams Job::adamw_params() const {
  ops::AdamwParams p;
  p.lr = options.effective_lr();
  p.beta1 = options.beta1;
  p.beta2 = options.beta2;
  p.eps = options.eps;
  p.weight_decay = options.effective_weight_decay();
  return p;
}

data::LoaderOptions Job::train_loader(int rank, int world, int64_t batch) const {
  data::LoaderOptions lo;
  lo.batch_size = batch;
  lo.shuffle = true;
  lo.drop_last = true;
  lo.seed = options.seed;
  lo.rank = rank;
  lo.world = world;
  lo.num_workers = options.workers;
  return lo;
}

}  // namespace dpx::parallel
