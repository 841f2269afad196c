// Linear's forward and backward over rows, and its PyTorch-default initialisation.
#include "layers/linear.hpp"

#include "kernels/ops.hpp"
#include "layers/layer_util.hpp"

namespace dpx::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Rng& rng, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  DPX_CHECK(in_features > 0 && out_features > 0, "Linear(", in_features, ", ", out_features,
            "): feature counts must be positive");
  add_parameter("weight", {out_, in_});
  if (has_bias_) add_parameter("bias", {out_});
  reset_parameters(rng);
}

void Linear::reset_parameters(Rng& rng) {
  float bound = default_init_bound(in_);
  init_uniform(weight().value, rng, bound);
  if (has_bias_) init_uniform(bias()->value, rng, bound);
}

std::string Linear::describe() const {
  return dpx::detail::concat("Linear(in_features=", in_, ", out_features=", out_, ", bias=",
                        py_bool(has_bias_), ")");
}

Tensor Linear::forward(Context& ctx, const Tensor& x) {
  if (x.dim() < 1 || x.size(-1) != in_)
    fail(describe(), " given input ", shape_str(x.shape()), ": the last dimension must be ", in_);
  if (channels_last_ && x.dim() == 4)
    fail(describe(), " given a channels-last map ", shape_str(x.shape()),
         ": under --memory-format channels_last a Linear takes rows (a Flatten before it), not an image map");
  x_shape_ = x.shape();
  x_ = x.view({-1, in_});
  Shape y_shape = x_shape_;
  y_shape.back() = out_;
  Tensor y = Tensor::empty({x_.size(0), out_}, DType::f32, ctx.device);
  last_flops_ = 2 * x_.size(0) * in_ * out_;
  ops::linear_forward(ctx, y, x_, weight().value, has_bias_ ? &bias()->value : nullptr);
  return y.view(y_shape);
}

Tensor Linear::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(x_.defined(), describe(), ": backward called before forward");
  Shape y_shape = x_shape_;
  y_shape.back() = out_;
  if (dy.shape() != y_shape)
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(y_shape));
  const FreeSaved free_saved(*this);
  // Without a caller for dx (the first trainable layer after a frozen backbone) only the
  // weight gradients are computed.
  // dx is written over, not added into: no zero fill.
  Tensor dx = input_grad_needed() ? empty_on(ctx, {x_.size(0), in_}) : Tensor();
  Tensor* dw = grad_target(weight());
  Tensor* db = has_bias_ ? grad_target(*bias()) : nullptr;
  ops::linear_backward(ctx, dx.defined() ? &dx : nullptr, dw, db, dy.view({-1, out_}), x_, weight().value,
                       ops::DxMode::overwrite);
  grad_ready(weight());
  if (has_bias_) grad_ready(*bias());
  return dx.defined() ? dx.view(x_shape_) : dx;
}

}  // namespace dpx::nn
