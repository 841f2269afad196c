// Flatten: a zero-copy view forward, a fresh gradient backward.
#include "layers/flatten.hpp"

#include "kernels/ops.hpp"

namespace dpx::nn {

Tensor Flatten::forward(Context& ctx, const Tensor& x) {
  if (x.dim() < 2)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected (N, ...) with 2 or more dimensions");
  x_shape_ = x.shape();
  permuted_ = channels_last_ && x.dim() == 4 && x.size(1) * x.size(2) > 1;
  if (!permuted_) return x.view({x.size(0), shape_numel(Shape(x_shape_.begin() + 1, x_shape_.end()))});
  Tensor y = Tensor::empty({x.size(0), x.size(3), x.size(1), x.size(2)}, DType::f32, ctx.device);
  ops::permute(ctx, y, x, {0, 3, 1, 2});
  return y.view({x.size(0), -1});
}

Tensor Flatten::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(!x_shape_.empty(), describe(), ": backward called before forward");
  if (dy.numel() != shape_numel(x_shape_) || dy.dim() != 2 || dy.size(0) != x_shape_[0])
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), " for input ", shape_str(x_shape_));
  // A copy, not a view of dy: callers may add into dx (residual branches) and must not
  // change the gradient that the next layer owns.
  Tensor dx = Tensor::empty(x_shape_, DType::f32, ctx.device);
  if (permuted_) {
    ops::permute_backward(ctx, dx, dy.view({x_shape_[0], x_shape_[3], x_shape_[1], x_shape_[2]}), {0, 3, 1, 2},
                          ops::DxMode::overwrite);
    return dx;
  }
  ops::copy(ctx, dx, dy);
  return dx;
}

}  // namespace dpx::nn
