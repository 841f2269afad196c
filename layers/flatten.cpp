// Flatten: a zero-copy view forward, a fresh gradient backward.
#include "layers/flatten.hpp"

#include "kernels/ops.hpp"

namespace dpx::nn {

Tensor Flatten::forward(Context&, const Tensor& x) {
  if (x.dim() < 2)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected (N, ...) with 2 or more dimensions");
  x_shape_ = x.shape();
  return x.view({x.size(0), shape_numel(Shape(x_shape_.begin() + 1, x_shape_.end()))});
}

Tensor Flatten::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(!x_shape_.empty(), describe(), ": backward called before forward");
  if (dy.numel() != shape_numel(x_shape_) || dy.dim() != 2 || dy.size(0) != x_shape_[0])
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), " for input ", shape_str(x_shape_));
  // A copy, not a view of dy: callers may add into dx (residual branches) and must not
  // change the gradient that the next layer owns.
  Tensor dx = Tensor::empty(x_shape_, DType::f32, ctx.device);
  ops::copy(ctx, dx, dy);
  return dx;
}

}  // namespace dpx::nn
