// Building a Job (see job.hpp): the data sets, the initial model and its weights, a checkpoint to
// resume from, the optimizer and each rank's loader.
#include "parallel/train/job.hpp"

#include <algorithm>
#include <thread>

#include "core/data/datasets.hpp"
#include "core/data/dataset.hpp"
#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "core/thread_check.hpp"
#include "zoo/registry.hpp"
#include "zoo/weights.hpp"

namespace dpx::parallel {

namespace {

// A weight that is NaN or infinite poisons every step after it: refuse the file at once.
void check_finite(nn::Model& model, const std::string& file, const char* flag) {
  zoo::check_finite(model, file, flag, "--on-nonfinite ignore loads it anyway");
}

}  // namespace

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
  {  // the threads this process will run at once, asked for before OpenMP starts them
    const int local_ranks = o.process_ranks > 0 ? 1 : ranks;
    check_threads_available(
        (threads_per_rank + o.workers) * local_ranks,
        detail::concat(o.threads > 0 ? "--threads " : "--threads (the default, every core: ",
                       o.threads > 0 ? o.threads : threads_per_rank * local_ranks,
                       o.threads > 0 ? "" : ")", local_ranks > 1 ? detail::concat(" over ", local_ranks, " thread ranks") : "",
                       " with --workers ", o.workers, local_ranks > 1 ? " each" : ""));
  }

  train_set = data::make_dataset(data_spec(o), data::Split::train);
  if (o.evaluate) test_set = data::make_dataset(data_spec(o), data::Split::test);
  steps_per_epoch = check_fits(o, *train_set);
  if (test_set && test_set->sample_shape() != train_set->sample_shape())
    usage_fail("the test images are ", shape_str(test_set->sample_shape()), " but the training images are ",
               shape_str(train_set->sample_shape()), " (--data-dir ", o.data_dir.empty() ? "(default)" : o.data_dir,
               "): give a data set whose two splits have one size, or --image-size to resize both");

  Shape sample = train_set->sample_shape();  // (C, H, W)
  zoo::ModelOptions mo;
  mo.num_classes = static_cast<int>(train_set->num_classes());
  mo.in_channels = static_cast<int>(sample[0]);
  mo.image_size = static_cast<int>(sample[1]);
  mo.seed = o.seed;
  mo.head = o.head;
  mo.freeze_backbone = o.freeze_backbone;
  model_options = mo;
  initial = nn::Model(zoo::build_model(o.model, mo), Device::cpu(), /*with_grads=*/false);  // only copied from
  initial.set_memory_format(o.memory_format);  // refused here, before any rank starts, where a layer cannot
  if (!o.weights_file.empty()) {
    // A new head (--head) keeps its fresh weights: the file's classifier takes no part.
    const std::string skip = o.head == "default" ? "" : zoo::find_model(o.model).classifier + ".";
    weights_report = zoo::load_state(initial, read_safetensors(o.weights_file), o.weights_strict, skip);
  }
  if (!o.weights_file.empty() && o.on_nonfinite != NonFinite::ignore) check_finite(initial, o.weights_file, "--weights");
  // --resume auto: one job script for the first run and every requeue (docs/cluster.md, Slurm): the
  // newest checkpoint of --checkpoint-dir where there is one, else a run from the start.
  const bool auto_start = o.resume == "auto" && !has_checkpoint(o.checkpoint_dir);
  if (!o.resume.empty() && !auto_start) {
    auto c = std::make_shared<Checkpoint>(read_checkpoint(o.resume == "auto" ? o.checkpoint_dir : o.resume));
    const std::string differs = resume_mismatch(*c, o, ranks);
    if (!differs.empty())
      usage_fail("--resume ", c->path, " was made by another run: ", differs,
                 ". Resume with the options it was made with, or start a new run without --resume");
    for (auto& [name, t] : initial.state_dict()) {
      auto it = c->model.find(name);
      if (it == c->model.end()) fail("--resume ", c->path, ": the checkpoint has no '", name, "'");
      check_tensor_matches(name, it->second, t.shape(), t.dtype());
      t.copy_from(it->second);
    }
    if (c->progress.epoch > o.epochs || c->progress.step > steps_per_epoch)
      usage_fail("--resume ", c->path, " stopped at epoch ", c->progress.epoch + 1, " step ", c->progress.step,
                 ", beyond this run's ", o.epochs, " epochs of ", steps_per_epoch, " steps");
    // The global step follows from the epoch and the step: a checkpoint that says otherwise was
    // edited (the learning-rate schedule and the records read it).
    if (c->progress.global_step != c->progress.epoch * steps_per_epoch + c->progress.step)
      usage_fail("--resume ", c->path, ": its global step ", c->progress.global_step, " is not epoch ",
                 c->progress.epoch, " x ", steps_per_epoch, " steps + step ", c->progress.step,
                 ": the checkpoint was edited or damaged; resume from another one");
    if (o.on_nonfinite != NonFinite::ignore) check_finite(initial, c->path, "--resume");
    resume = std::move(c);
  }
}

data::DatasetSpec Job::data_spec(const TrainOptions& o) {
  data::DatasetSpec spec;
  spec.name = o.dataset;
  spec.dir = o.data_dir;
  spec.image_size = o.image_size;
  spec.channels = o.channels;
  spec.synthetic_size = o.synthetic_size;
  spec.num_classes = o.num_classes;
  spec.seed = o.seed;
  spec.images = o.images;
  return spec;
}

int64_t Job::check_fits(const TrainOptions& o, const data::Dataset& train) {
  const int ranks = o.ranks();
  const int64_t rank_batch = o.batch_size / ranks;
  const zoo::ModelInfo& model = zoo::find_model(o.model);
  const int64_t size = train.sample_shape()[1];
  if (size < model.min_image_size)
    usage_fail(o.model, " needs an input of at least ", model.min_image_size, "x", model.min_image_size, " (the data is ",
               size, "x", size, ")", model.note.empty() ? "" : ": ", model.note, "; pass --image-size ",
               model.min_image_size, " or more");
  const int64_t n = train.size(), per_rank = n / ranks;
  if (per_rank < rank_batch)
    usage_fail("the training set has ", n, " samples: too few for ", ranks, " rank(s) x a batch of ", rank_batch,
               " per rank; pass a smaller --batch-size or fewer ranks",
               o.dataset == "synthetic" ? " (or a larger --synthetic-size)" : "");
  int64_t steps = per_rank / rank_batch;
  if (o.max_steps > 0) steps = std::min(steps, o.max_steps);
  if (o.warmup_steps >= steps * o.epochs)
    usage_fail("--warmup ", o.warmup_steps, " would exclude all ", steps * o.epochs, " steps of this run from "
               "the measurements: pass a smaller --warmup, or more --epochs or --steps");
  return steps;
}

nn::Model Job::copy_initial(Device device, int copies) {
  std::lock_guard<std::mutex> lock(copies_mu_);
  DPX_CHECK(copies_made_ < copies, "Job::copy_initial: ", copies, " copies were made already; the initial model is freed");
  nn::Model copy = initial.clone(device);
  if (++copies_made_ >= copies) initial = nn::Model();
  return copy;
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
