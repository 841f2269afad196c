// GELU, SiLU and Sigmoid: each forward keeps the one tensor its derivative reads; each backward
// returns a fresh dx the accumulating op writes into.
#include "layers/activation.hpp"

#include "kernels/ops.hpp"
#include "layers/layer_util.hpp"

namespace dpx::nn {

namespace {
// Checks dy against the cached tensor's shape, naming the layer.
void check_backward(const std::string& layer, const Tensor& saved, const Tensor& dy) {
  DPX_CHECK(saved.defined(), layer, ": backward called before forward");
  if (dy.shape() != saved.shape())
    fail(layer, ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(saved.shape()));
}
}  // namespace

Tensor GELU::forward(Context& ctx, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::f32, ctx.device);
  ops::gelu_forward(ctx, y, x);
  x_ = x;
  return y;
}

Tensor GELU::backward(Context& ctx, const Tensor& dy) {
  check_backward(describe(), x_, dy);
  Tensor dx = zeros_on(ctx, x_.shape());
  ops::gelu_backward(ctx, dx, dy, x_);
  return dx;
}

Tensor SiLU::forward(Context& ctx, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::f32, ctx.device);
  ops::silu_forward(ctx, y, x);
  x_ = x;
  return y;
}

Tensor SiLU::backward(Context& ctx, const Tensor& dy) {
  check_backward(describe(), x_, dy);
  Tensor dx = zeros_on(ctx, x_.shape());
  ops::silu_backward(ctx, dx, dy, x_);
  return dx;
}

Tensor Sigmoid::forward(Context& ctx, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::f32, ctx.device);
  ops::sigmoid_forward(ctx, y, x);
  y_ = y;
  return y;
}

Tensor Sigmoid::backward(Context& ctx, const Tensor& dy) {
  check_backward(describe(), y_, dy);
  Tensor dx = zeros_on(ctx, y_.shape());
  ops::sigmoid_backward(ctx, dx, dy, y_);
  return dx;
}

}  // namespace dpx::nn
