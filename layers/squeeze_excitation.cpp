// SqueezeExcitation: the gate path (pool, fc1, activation, fc2, sigmoid) runs through child
// modules; the product with x is a broadcasting multiply whose backward feeds both paths, the
// direct one added into the gradient the gate path's pool writes.
#include "layers/squeeze_excitation.hpp"

#include "kernels/ops.hpp"
#include "layers/activation.hpp"
#include "layers/conv2d.hpp"
#include "layers/layer_util.hpp"
#include "layers/pooling.hpp"

namespace dpx::nn {

namespace {
enum ExcitationChild : size_t { kAvgPool, kFc1, kFc2, kActivation, kScaleActivation };
}

SqueezeExcitation::SqueezeExcitation(int64_t input_channels, int64_t squeeze_channels, Rng& rng,
                                     std::unique_ptr<Module> activation)
    : c_(input_channels), s_(squeeze_channels) {
  DPX_CHECK(c_ > 0 && s_ > 0, describe(), ": channel counts must be positive");
  add_module("avgpool", std::make_unique<AdaptiveAvgPool2d>(1, 1));
  add_module("fc1", std::make_unique<Conv2d>(c_, s_, 1, rng));
  add_module("fc2", std::make_unique<Conv2d>(s_, c_, 1, rng));
  add_module("activation", activation ? std::move(activation) : std::make_unique<ReLU>());
  add_module("scale_activation", std::make_unique<Sigmoid>());
}

std::string SqueezeExcitation::describe() const {
  return detail::concat("SqueezeExcitation(", c_, ", ", s_, ")");
}

void SqueezeExcitation::clear_cache() {
  x_ = scale_ = Tensor();
  Module::clear_cache();
}

Tensor SqueezeExcitation::forward(Context& ctx, const Tensor& x) {
  if (x.dim() != 4 || x.size(channels_last_ ? 3 : 1) != c_)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected ", expected_maps(c_, channels_last_));
  Tensor s = child(kAvgPool).forward(ctx, x);
  for (size_t i : {kFc1, kActivation, kFc2, kScaleActivation}) s = child(i).forward(ctx, s);
  Tensor y = Tensor::empty(x.shape(), DType::f32, ctx.device);
  ops::mul_broadcast(ctx, y, x, s);
  x_ = x;
  scale_ = s;
  return y;
}

Tensor SqueezeExcitation::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(x_.defined(), describe(), ": backward called before forward");
  if (dy.shape() != x_.shape())
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(x_.shape()));
  const FreeSaved free_saved(*this);
  // The gates' gradient first (summed from dy and x), back through them to the average pool,
  // whose backward writes a fresh dx (its gradient spread over each map); then x's direct path,
  // dy * scale, added into that dx: x reaches y both ways, and the two meet without a zero-filled
  // dx or a pass of their own.
  Tensor dscale = zeros_on(ctx, scale_.shape());
  ops::mul_broadcast_backward(ctx, nullptr, &dscale, dy, x_, scale_);
  Tensor dx = dscale;
  for (size_t i : {kScaleActivation, kFc2, kActivation, kFc1, kAvgPool}) dx = child(i).backward(ctx, dx);
  ops::mul_broadcast_backward(ctx, &dx, nullptr, dy, x_, scale_);
  return dx;
}

}  // namespace dpx::nn
