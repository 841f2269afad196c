// LayerNorm over the last dimension: the per-row statistics forward saves are what the backward
// op reads; gamma and beta gradients are announced ready as soon as they are final.
#include "layers/layer_norm.hpp"

#include <cstdio>

#include "kernels/ops.hpp"
#include "layers/layer_util.hpp"

namespace dpx::nn {

LayerNorm::LayerNorm(int64_t normalized_shape, float eps) : d_(normalized_shape), eps_(eps) {
  DPX_CHECK(normalized_shape > 0 && eps > 0, "LayerNorm(", normalized_shape, ", eps=", eps,
            "): the normalised size and eps must be positive");
  add_parameter("weight", {d_});
  add_parameter("bias", {d_});
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  init_constant(weight().value, 1.f);
  init_constant(bias().value, 0.f);
}

void LayerNorm::reset_parameters(Rng&) { reset_parameters(); }

std::string LayerNorm::describe() const {
  char eps[32];
  std::snprintf(eps, sizeof eps, "%g", static_cast<double>(eps_));  // 1e-05, as Python prints it
  return detail::concat("LayerNorm((", d_, ",), eps=", eps, ", elementwise_affine=True)");
}

Tensor LayerNorm::forward(Context& ctx, const Tensor& x) {
  if (x.dim() < 1 || x.size(-1) != d_)
    fail(describe(), " given input ", shape_str(x.shape()), ": the last dimension must be ", d_);
  const int64_t rows = x.numel() / d_;
  Tensor y = Tensor::empty(x.shape(), DType::f32, ctx.device);
  mean_ = Tensor::empty({rows}, DType::f32, ctx.device);
  rstd_ = Tensor::empty({rows}, DType::f32, ctx.device);
  ops::layer_norm_forward(ctx, y, mean_, rstd_, x, weight().value, bias().value, eps_);
  x_ = x;
  return y;
}

Tensor LayerNorm::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(x_.defined(), describe(), ": backward called before forward");
  Tensor dx = empty_on(ctx, x_.shape());  // written over, not added into
  backward_into(ctx, dy, dx, ops::DxMode::overwrite);
  return dx;
}

void LayerNorm::backward_add(Context& ctx, const Tensor& dy, Tensor& into) {
  DPX_CHECK(x_.defined(), describe(), ": backward called before forward");
  check_add_target(describe(), into, x_.shape());
  backward_into(ctx, dy, into, ops::DxMode::add);
}

void LayerNorm::backward_into(Context& ctx, const Tensor& dy, Tensor& dx, ops::DxMode dx_mode) {
  if (dy.shape() != x_.shape())
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(x_.shape()));
  const FreeSaved free_saved(*this);
  ops::layer_norm_backward(ctx, &dx, grad_target(weight()), grad_target(bias()), dy, x_, weight().value,
                           mean_, rstd_, dx_mode);
  grad_ready(weight());
  grad_ready(bias());
}

}  // namespace dpx::nn
