// Test-set evaluation: the model in eval mode over a whole data set, in order.
#pragma once
#include "core/context.hpp"
#include "core/data/dataset.hpp"
#include "layers/model.hpp"

namespace dpx::parallel {

struct EvalResult {
  double accuracy = 0;  // fraction of correct arg-max predictions
  double loss = 0;      // mean cross-entropy
  int64_t samples = 0;
};

EvalResult evaluate(Context& ctx, nn::Model& model, const data::Dataset& dataset, int64_t batch_size);

}  // namespace dpx::parallel
