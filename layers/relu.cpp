// ReLU forward and backward (the backward reads the cached output).
#include "layers/relu.hpp"

#include "kernels/ops.hpp"
#include "layers/layer_util.hpp"

namespace dpx::nn {

Tensor ReLU::forward(Context& ctx, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::f32, ctx.device);
  ops::relu_forward(ctx, y, x);
  y_ = y;
  return y;
}

Tensor ReLU::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(y_.defined(), "ReLU(): backward called before forward");
  if (dy.shape() != y_.shape())
    fail("ReLU(): backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(y_.shape()));
  Tensor dx = zeros_on(ctx, y_.shape());
  ops::relu_backward(ctx, dx, dy, y_);
  return dx;
}

}  // namespace dpx::nn
