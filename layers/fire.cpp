// Fire: forward through the squeeze and both expand branches, concatenated; backward splits
// the gradient, runs each branch back and adds the two at the squeeze output (the second
// branch's convolution adding into the first's gradient).
#include "layers/fire.hpp"

#include "kernels/ops.hpp"
#include "layers/conv2d.hpp"
#include "layers/layer_util.hpp"
#include "layers/sequential.hpp"
#include "layers/activation.hpp"

namespace dpx::nn {

Fire::Fire(int64_t inplanes, int64_t squeeze_planes, int64_t expand1x1_planes, int64_t expand3x3_planes,
           Rng& rng)
    : in_(inplanes), squeeze_(squeeze_planes), e1_(expand1x1_planes), e3_(expand3x3_planes) {
  if (in_ < 1 || squeeze_ < 1 || e1_ < 1 || e3_ < 1) fail(describe(), ": every channel count must be positive");
  add_module("squeeze", std::make_unique<Conv2d>(in_, squeeze_, 1, rng));
  add_module("squeeze_activation", std::make_unique<ReLU>());
  add_module("expand1x1", std::make_unique<Conv2d>(squeeze_, e1_, 1, rng));
  add_module("expand1x1_activation", std::make_unique<ReLU>());
  add_module("expand3x3", std::make_unique<Conv2d>(squeeze_, e3_, 3, rng, 1, /*padding=*/1));
  add_module("expand3x3_activation", std::make_unique<ReLU>());
}

std::string Fire::describe() const {
  return detail::concat("Fire(", in_, ", squeeze ", squeeze_, ", expand ", e1_, " + ", e3_, ")");
}

Tensor Fire::forward(Context& ctx, const Tensor& x) {
  if (x.dim() != 4 || x.size(channels_last_ ? 3 : 1) != in_)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected ", expected_maps(in_, channels_last_));
  // Each convolution with its ReLU applied in the same pass (nn::forward_children); s, which
  // only the expand convolutions read, in half precision under --precision bf16|fp16.
  Tensor s = forward_children(ctx, *this, 0, 2, x, /*then_half=*/true);
  Tensor a = forward_children(ctx, *this, 2, 4, s);
  Tensor b = forward_children(ctx, *this, 4, 6, s);
  Tensor y = empty_on(ctx, maps_shape(a.shape(), e1_ + e3_, channels_last_));
  Tensor joined = channel_major(y, channels_last_);
  ops::concat_channels(ctx, joined, {channel_major(a, channels_last_), channel_major(b, channels_last_)});
  y_shape_ = y.shape();
  return y;
}

Tensor Fire::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(!y_shape_.empty(), describe(), ": backward called before forward");
  if (dy.shape() != y_shape_)
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(y_shape_));
  // Each branch's channels of dy, copied out (written over: no zero fill).
  Tensor da = empty_on(ctx, maps_shape(y_shape_, e1_, channels_last_));
  Tensor db = empty_on(ctx, maps_shape(y_shape_, e3_, channels_last_));
  Tensor da_c = channel_major(da, channels_last_), db_c = channel_major(db, channels_last_);
  const Tensor dy_c = channel_major(dy, channels_last_);
  ops::copy_channels(ctx, da_c, 0, dy_c, 0, e1_, ops::DxMode::overwrite);
  ops::copy_channels(ctx, db_c, 0, dy_c, e1_, e3_, ops::DxMode::overwrite);
  // expand3x3 first: its parameters were registered last (reverse order, as DDP's buckets fill).
  // Each branch through nn::backward_children (a ReLU's gradient in half precision for its
  // convolution under --precision bf16|fp16); expand1x1 adds its dx into expand3x3's
  // (Module::backward_add), the two branches' gradients at s joined without a pass of their own.
  Tensor ds = backward_children(ctx, *this, 4, 6, db);
  backward_children(ctx, *this, 2, 4, da, &ds);
  return backward_children(ctx, *this, 0, 2, ds);
}

}  // namespace dpx::nn
