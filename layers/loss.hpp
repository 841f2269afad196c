// CrossEntropyLoss: softmax cross-entropy averaged over the batch (torch.nn.CrossEntropyLoss
// with integer class labels and optional label smoothing), and accuracy by arg-max.
// Not a Module: it takes labels and has no parameters.
#pragma once
#include "core/context.hpp"
#include "core/tensor.hpp"

namespace dpx::nn {

class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(float label_smoothing = 0.f);

  // Mean loss over the batch; logits (N, C) f32, labels (N) i64 in [0, C). Keeps the softmax
  // for backward. Reading the value waits for the device; forward_tensor does not.
  float forward(Context& ctx, const Tensor& logits, const Tensor& labels);
  // The same, as a (1) tensor on ctx.device, without a host synchronisation.
  Tensor forward_tensor(Context& ctx, const Tensor& logits, const Tensor& labels);
  // d(scale * mean loss)/d(logits), (N, C), a fresh tensor. scale = 1/k averages k
  // accumulated micro-batches.
  Tensor backward(Context& ctx, float scale = 1.f);
  void clear_cache();

  float label_smoothing() const { return label_smoothing_; }

 private:
  float label_smoothing_;
  Tensor probs_;   // (N, C) softmax of the last forward's logits
  Tensor labels_;  // (N) i64, the last forward's labels (shared, not copied)
};

// Rows of logits (N, C) whose arg-max equals the label, over N; 0 for an empty batch.
double accuracy(Context& ctx, const Tensor& logits, const Tensor& labels);

}  // namespace dpx::nn
