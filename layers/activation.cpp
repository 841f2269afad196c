// The activation layers' forward and backward (one template, four instances) and the op each
// one runs.
#include "layers/activation.hpp"

#include "kernels/ops.hpp"
#include "layers/layer_util.hpp"

namespace dpx::nn {

void ReluOps::forward(Context& ctx, Tensor& y, const Tensor& x) { ops::relu_forward(ctx, y, x); }
void ReluOps::backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y) {
  ops::relu_backward(ctx, dx, dy, y, ops::DxMode::overwrite);
}
void GeluOps::forward(Context& ctx, Tensor& y, const Tensor& x) { ops::gelu_forward(ctx, y, x); }
void GeluOps::backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x) {
  ops::gelu_backward(ctx, dx, dy, x, ops::DxMode::overwrite);
}
void SiluOps::forward(Context& ctx, Tensor& y, const Tensor& x) { ops::silu_forward(ctx, y, x); }
void SiluOps::backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x) {
  ops::silu_backward(ctx, dx, dy, x, ops::DxMode::overwrite);
}
void SigmoidOps::forward(Context& ctx, Tensor& y, const Tensor& x) { ops::sigmoid_forward(ctx, y, x); }
void SigmoidOps::backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y) {
  ops::sigmoid_backward(ctx, dx, dy, y, ops::DxMode::overwrite);
}

template <class Ops>
Tensor Activation<Ops>::forward(Context& ctx, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::f32, ctx.device);
  Ops::forward(ctx, y, x);
  kept_ = Ops::keeps_output ? y : x;
  return y;
}

template <class Ops>
Tensor Activation<Ops>::backward(Context& ctx, const Tensor& dy) {
  return backward_in(ctx, dy, DType::f32);
}

template <class Ops>
Tensor Activation<Ops>::backward(Context& ctx, const Tensor& dy, DType dx_dtype)
  requires std::is_same_v<Ops, ReluOps>
{
  return backward_in(ctx, dy, dx_dtype);
}

template <class Ops>
Tensor Activation<Ops>::backward_in(Context& ctx, const Tensor& dy, DType dx_dtype) {
  const std::string layer = this->describe();
  DPX_CHECK(kept_.defined(), layer, ": backward called before forward");
  if (dy.shape() != kept_.shape())
    fail(layer, ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(kept_.shape()));
  const FreeSaved free_saved(*this);
  Tensor dx = Ops::overwrites_dx ? Tensor::empty(kept_.shape(), dx_dtype, ctx.device)
                                 : zeros_on(ctx, kept_.shape());
  Ops::backward(ctx, dx, dy, kept_);
  return dx;
}

template class Activation<ReluOps>;
template class Activation<GeluOps>;
template class Activation<SiluOps>;
template class Activation<SigmoidOps>;

}  // namespace dpx::nn
