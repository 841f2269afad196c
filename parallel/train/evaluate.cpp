// Test-set evaluation in eval mode, in data-set order (no shuffling, no dropped tail).
#include "parallel/train/evaluate.hpp"

#include <algorithm>

#include "core/data/loader.hpp"
#include "kernels/ops.hpp"
#include "layers/loss.hpp"

namespace dpx::parallel {

EvalResult evaluate(Context& ctx, nn::Model& model, const data::Dataset& dataset, int64_t batch_size) {
  bool was_training = model.root().training();
  model.eval();
  data::LoaderOptions lo;
  lo.batch_size = std::min<int64_t>(batch_size, dataset.size());
  lo.shuffle = false;
  lo.drop_last = false;
  lo.num_workers = 1;
  data::DataLoader loader(std::shared_ptr<const data::Dataset>(&dataset, [](const data::Dataset*) {}), lo);
  loader.start_epoch(0);
  nn::CrossEntropyLoss criterion;
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  while (auto batch = loader.next()) {
    Tensor images = batch->images, labels = batch->labels;
    if (!ctx.device.is_cpu()) {
      images = images.to(ctx.device);
      labels = labels.to(ctx.device);
    }
    Tensor logits = model.forward(ctx, images);
    int64_t n = images.size(0);
    loss_sum += criterion.forward(ctx, logits, labels) * static_cast<double>(n);
    correct += ops::count_correct(ctx, logits, labels);
    r.samples += n;
  }
  model.root().clear_cache();
  model.train(was_training);
  if (r.samples > 0) {
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
    r.loss = loss_sum / static_cast<double>(r.samples);
  }
  return r;
}

}  // namespace dpx::parallel
