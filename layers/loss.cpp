// CrossEntropyLoss over ops::cross_entropy_*, with the shape and dtype checks that name
// what was passed, and accuracy through ops::count_correct.
#include "layers/loss.hpp"

#include "kernels/ops.hpp"

namespace dpx::nn {

namespace {
void check_batch(const char* what, const Tensor& logits, const Tensor& labels) {
  if (logits.dim() != 2 || labels.dim() != 1 || labels.size(0) != logits.size(0))
    fail(what, " given logits ", shape_str(logits.shape()), " and labels ", shape_str(labels.shape()),
         ": expected logits (N, C) and labels (N)");
  if (labels.dtype() != DType::i64)
    fail(what, ": labels must be i64 class indices, got ", dtype_name(labels.dtype()));
}
}  // namespace

CrossEntropyLoss::CrossEntropyLoss(float label_smoothing) : label_smoothing_(label_smoothing) {
  DPX_CHECK(label_smoothing >= 0.f && label_smoothing <= 1.f, "CrossEntropyLoss(label_smoothing=",
            label_smoothing, "): label smoothing must be in [0, 1]");
}

Tensor CrossEntropyLoss::forward_tensor(Context& ctx, const Tensor& logits, const Tensor& labels) {
  check_batch("CrossEntropyLoss", logits, labels);
  DPX_CHECK(logits.size(0) > 0, "CrossEntropyLoss: the batch is empty (logits ",
            shape_str(logits.shape()), "); the mean of no losses is undefined");
  Tensor loss = Tensor::empty({1}, DType::f32, ctx.device);
  probs_ = Tensor::empty(logits.shape(), DType::f32, ctx.device);
  ops::cross_entropy_forward(ctx, loss, probs_, logits, labels, label_smoothing_);
  labels_ = labels;
  return loss;
}

float CrossEntropyLoss::forward(Context& ctx, const Tensor& logits, const Tensor& labels) {
  return forward_tensor(ctx, logits, labels).item();
}

Tensor CrossEntropyLoss::backward(Context& ctx, float scale) {
  DPX_CHECK(probs_.defined(), "CrossEntropyLoss: backward called before forward");
  Tensor dlogits = Tensor::empty(probs_.shape(), DType::f32, ctx.device);
  ops::fill(ctx, dlogits, 0.f);
  ops::cross_entropy_backward(ctx, dlogits, probs_, labels_, label_smoothing_, scale);
  return dlogits;
}

void CrossEntropyLoss::clear_cache() {
  probs_ = labels_ = Tensor();
}

double accuracy(Context& ctx, const Tensor& logits, const Tensor& labels) {
  check_batch("accuracy", logits, labels);
  if (logits.size(0) == 0) return 0.0;
  return static_cast<double>(ops::count_correct(ctx, logits, labels)) / static_cast<double>(logits.size(0));
}

}  // namespace dpx::nn
