// Dropout: one Rng stream per layer, forked per training forward, so masks are
// reproducible from the seed and independent of the thread count.
#include "layers/dropout.hpp"

#include "kernels/ops.hpp"
#include "layers/layer_util.hpp"

namespace dpx::nn {

Dropout::Dropout(float p, Rng& rng) : p_(p), rng_(rng.fork(rng.advance(1))) {
  DPX_CHECK(p >= 0.f && p <= 1.f, "Dropout(p=", p, "): p must be a probability in [0, 1]");
}

std::string Dropout::describe() const {
  return dpx::detail::concat("Dropout(p=", p_, ", inplace=False)");
}

void Dropout::reseed(const Rng& rng) {
  rng_ = rng;
  steps_ = 0;
}

Tensor Dropout::forward(Context& ctx, const Tensor& x) {
  x_shape_ = x.shape();
  mask_ = Tensor();
  if (!training() || p_ == 0.f) {
    last_ = Last::identity;
    return x;  // as torch: the input itself, no copy
  }
  Tensor y = Tensor::empty(x.shape(), DType::f32, ctx.device);
  Rng step = rng_.fork(ctx.random_offset ? steps_ : steps_++);  // recorded: the replay count moves it
  if (p_ == 1.f) {  // 1/(1-p) would be infinite; torch returns zeros
    last_ = Last::all_dropped;
    ops::fill(ctx, y, 0.f);
    return y;
  }
  last_ = Last::masked;
  mask_ = Tensor::empty(x.shape(), DType::u8, ctx.device);
  ops::dropout_forward(ctx, y, mask_, x, p_, step.seed(), step.stream());
  return y;
}

Tensor Dropout::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(last_ != Last::none, describe(), ": backward called before forward");
  if (dy.shape() != x_shape_)
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(x_shape_));
  const FreeSaved free_saved(*this);
  if (last_ == Last::identity) {
    Tensor dx = Tensor::empty(x_shape_, DType::f32, ctx.device);
    ops::copy(ctx, dx, dy);
    return dx;
  }
  Tensor dx = zeros_on(ctx, x_shape_);  // stays zero when everything was dropped
  if (last_ == Last::masked) ops::dropout_backward(ctx, dx, dy, mask_, p_);
  return dx;
}

}  // namespace dpx::nn
