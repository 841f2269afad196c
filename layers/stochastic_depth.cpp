// StochasticDepth: per-sample (or per-batch) keep/drop noise drawn on the device (bernoulli_scale)
// from the layer's stream, applied with a broadcasting multiply; backward multiplies dy by the
// same noise.
#include "layers/stochastic_depth.hpp"

#include "kernels/ops.hpp"
#include "layers/layer_util.hpp"

namespace dpx::nn {

StochasticDepth::StochasticDepth(float p, const std::string& mode, Rng& rng)
    : p_(p), row_(mode == "row"), rng_(rng.fork(rng.advance(1))) {
  if (!(p >= 0.f && p <= 1.f))
    fail("StochasticDepth(p=", p, ", mode=", mode, "): p must be a probability in [0, 1]");
  if (mode != "row" && mode != "batch")
    fail("StochasticDepth(p=", p, ", mode=", mode, "): mode must be \"row\" or \"batch\"");
}

std::string StochasticDepth::describe() const {
  return detail::concat("StochasticDepth(p=", p_, ", mode=", row_ ? "row" : "batch", ")");
}

void StochasticDepth::reseed(const Rng& rng) {
  rng_ = rng;
  steps_ = 0;
}

Tensor StochasticDepth::apply(Context& ctx, const Tensor& x, Tensor& noise) {
  noise = Tensor();
  if (!training() || p_ == 0.f) return x;  // as torchvision: the input itself
  if (x.dim() < 1) fail(describe(), " given a 0-dimensional input; expected (N, ...)");
  Shape shape(static_cast<size_t>(x.dim()), 1);
  if (row_) shape[0] = x.size(0);
  // torch: bernoulli(survival), divided by survival when that is positive (all zeros at p = 1).
  // Drawn on the op's device from (seed, step) alone: no host copy in the step, so a CUDA graph
  // can capture it, and every device draws the same numbers.
  const Rng draw = rng_.fork(ctx.random_offset ? steps_ : steps_++);  // recorded: the replay count moves it
  noise = Tensor::empty(shape, DType::f32, ctx.device);
  ops::bernoulli_scale(ctx, noise, 1.f - p_, draw.seed(), draw.stream());
  Tensor y = Tensor::empty(x.shape(), DType::f32, ctx.device);
  ops::mul_broadcast(ctx, y, x, noise);
  return y;
}

Tensor StochasticDepth::apply_backward(Context& ctx, const Tensor& dy, const Tensor& noise) const {
  Tensor dx = Tensor::empty(dy.shape(), DType::f32, ctx.device);
  if (noise.defined())
    ops::mul_broadcast(ctx, dx, dy, noise);  // d(x * noise)/dx = noise
  else
    ops::copy(ctx, dx, dy);
  return dx;
}

Tensor StochasticDepth::forward(Context& ctx, const Tensor& x) {
  forwarded_ = true;
  return apply(ctx, x, noise_);
}

Tensor StochasticDepth::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(forwarded_, describe(), ": backward called before forward");
  if (noise_.defined() && (dy.dim() != noise_.dim() || (row_ && dy.size(0) != noise_.size(0))))
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), " for noise ", shape_str(noise_.shape()));
  const FreeSaved free_saved(*this);
  return apply_backward(ctx, dy, noise_);
}

}  // namespace dpx::nn
