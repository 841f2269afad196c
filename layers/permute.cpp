// Permute: a copy with reordered dimensions; backward applies the inverse permutation into a
// fresh dx (the op accumulates, so it starts at zero).
#include "layers/permute.hpp"

#include <algorithm>

#include "kernels/ops.hpp"
#include "layers/layer_util.hpp"

namespace dpx::nn {

Permute::Permute(std::vector<int> dims) : dims_(std::move(dims)) {
  std::vector<int> sorted = dims_;
  std::sort(sorted.begin(), sorted.end());
  bool ok = !sorted.empty() && sorted.size() <= 6;
  for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == static_cast<int>(i);
  if (!ok) fail(describe(), ": dims must be a permutation of 0 .. rank-1, at most 6 dimensions");
}

std::string Permute::describe() const {
  std::string s = "Permute(dims=[";
  for (size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "])";
}

Tensor Permute::forward(Context& ctx, const Tensor& x) {
  if (x.dim() != static_cast<int>(dims_.size()))
    fail(describe(), " given input ", shape_str(x.shape()), ": expected ", dims_.size(), " dimensions");
  Shape out;
  for (int d : dims_) out.push_back(x.size(d));
  Tensor y = Tensor::empty(out, DType::f32, ctx.device);
  ops::permute(ctx, y, x, dims_);
  x_shape_ = x.shape();
  return y;
}

Tensor Permute::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(!x_shape_.empty(), describe(), ": backward called before forward");
  Tensor dx = empty_on(ctx, x_shape_);  // written over: every element once
  ops::permute_backward(ctx, dx, dy, dims_, ops::DxMode::overwrite);  // checks dy's shape against the permuted one
  return dx;
}

}  // namespace dpx::nn
