// DenseNet's dense layer, transition and dense block. The block keeps its features in one
// buffer, (N, C_in + L growth, H, W), instead of concatenating them again for every layer, as
// torch.cat does in torchvision: the block input and each layer's output are copied into it once,
// each layer's first batch norm reads its leading channels in place (BatchNorm2d::forward_prefix),
// and the buffer is the block's output. Backward mirrors it: one gradient buffer, each layer's
// output gradient copied out of it and its input gradient added into its leading channels.
#include "layers/dense_block.hpp"

#include "kernels/ops.hpp"
#include "layers/activation.hpp"
#include "layers/batch_norm.hpp"
#include "layers/conv2d.hpp"
#include "layers/dropout.hpp"
#include "layers/layer_util.hpp"
#include "layers/pooling.hpp"
#include "layers/sequential.hpp"

namespace dpx::nn {

namespace {
// A dense layer's norm1 and relu1 as dense_layer() makes them (a Sequential that runs its
// children in order), which read the block's buffer in place; both null for a layer made
// otherwise (it then gets a copy of its channels and runs as any module).
struct Head {
  BatchNorm2d* norm = nullptr;
  ReLU* relu = nullptr;
};

Head head_of(Module& layer) {
  if (!dynamic_cast<Sequential*>(&layer) || layer.num_children() < 2) return {};
  auto* norm = dynamic_cast<BatchNorm2d*>(&layer.child(0));
  auto* relu = dynamic_cast<ReLU*>(&layer.child(1));
  if (!norm || !relu) return {};
  return {norm, relu};
}

}  // namespace

std::unique_ptr<Sequential> dense_layer(int64_t in_channels, int64_t growth, int64_t bn_size,
                                        float drop_rate, Rng& rng) {
  if (in_channels < 1 || growth < 1 || bn_size < 1)
    fail("dense layer (", in_channels, " channels, growth ", growth, ", bn_size ", bn_size,
         "): all must be positive");
  auto s = std::make_unique<Sequential>();
  s->add("norm1", std::make_unique<BatchNorm2d>(in_channels));
  s->add("relu1", std::make_unique<ReLU>());
  s->add("conv1", std::make_unique<Conv2d>(in_channels, bn_size * growth, 1, rng, 1, 0, 1, 1, false));
  s->add("norm2", std::make_unique<BatchNorm2d>(bn_size * growth));
  s->add("relu2", std::make_unique<ReLU>());
  s->add("conv2", std::make_unique<Conv2d>(bn_size * growth, growth, 3, rng, 1, 1, 1, 1, false));
  if (drop_rate > 0) s->add("dropout", std::make_unique<Dropout>(drop_rate, rng));
  return s;
}

std::unique_ptr<Sequential> dense_transition(int64_t in_channels, int64_t out_channels, Rng& rng) {
  auto s = std::make_unique<Sequential>();
  s->add("norm", std::make_unique<BatchNorm2d>(in_channels));
  s->add("relu", std::make_unique<ReLU>());
  s->add("conv", std::make_unique<Conv2d>(in_channels, out_channels, 1, rng, 1, 0, 1, 1, false));
  s->add("pool", std::make_unique<AvgPool2d>(2, 2));
  return s;
}

DenseBlock::DenseBlock(int num_layers, int64_t in_channels, int64_t bn_size, int64_t growth,
                       float drop_rate, Rng& rng)
    : in_(in_channels), growth_(growth) {
  if (num_layers < 1) fail(describe(), ": a dense block needs at least one layer");
  for (int l = 0; l < num_layers; ++l)
    add_module("denselayer" + std::to_string(l + 1),
               dense_layer(in_channels + l * growth, growth, bn_size, drop_rate, rng));
}

std::string DenseBlock::describe() const {
  return detail::concat("DenseBlock(", num_children(), " layers, ", in_, " -> ", out_channels(),
                        " channels, growth ", growth_, ")");
}

Tensor DenseBlock::forward(Context& ctx, const Tensor& x) {
  if (x.dim() != 4 || x.size(channels_last_ ? 3 : 1) != in_)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected ", expected_maps(in_, channels_last_));
  x_shape_ = x.shape();
  const bool last = channels_last_;
  Tensor features = empty_on(ctx, maps_shape(x_shape_, out_channels(), last));
  Tensor features_c = channel_major(features, last);  // the same memory, cut along its channels
  ops::copy_channels(ctx, features_c, 0, channel_major(x, last), 0, in_, ops::DxMode::overwrite);
  for (size_t l = 0; l < num_children(); ++l) {
    const int64_t channels = in_ + static_cast<int64_t>(l) * growth_;  // what layer l reads
    Module& layer = child(l);
    Tensor out;
    if (const Head h = head_of(layer); h.norm) {
      // In the compute's half precision under --precision bf16|fp16 where the child after the ReLU
      // (conv1) takes such maps, as forward_children would hand it: the map the ReLU keeps.
      const size_t n = layer.num_children();
      const DType y_dtype = map_dtype_for(ctx, layer, 2, n);
      Tensor y = h.relu->forward_applied(h.norm->forward_prefix(ctx, features, ops::Epilogue::relu, y_dtype));
      out = forward_children(ctx, layer, 2, n, y);
    } else {
      Tensor input = empty_on(ctx, maps_shape(x_shape_, channels, last));
      Tensor input_c = channel_major(input, last);
      ops::copy_channels(ctx, input_c, 0, features_c, 0, channels, ops::DxMode::overwrite);
      out = layer.forward(ctx, input);
    }
    if (out.shape() != maps_shape(x_shape_, growth_, last))
      fail(describe(), ": layer ", l + 1, " returned ", shape_str(out.shape()), ", expected ",
           shape_str(maps_shape(x_shape_, growth_, last)));
    ops::copy_channels(ctx, features_c, channels, channel_major(out, last), 0, growth_, ops::DxMode::overwrite);
  }
  return features;
}

Tensor DenseBlock::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(!x_shape_.empty(), describe(), ": backward called before forward");
  const bool last = channels_last_;
  const Shape y_shape = maps_shape(x_shape_, out_channels(), last);
  if (dy.shape() != y_shape)
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(y_shape));
  // The features' gradient: layer l's output's channels are complete once every later layer has
  // added what it read.
  Tensor grad = Tensor::empty(y_shape, DType::f32, ctx.device);
  ops::copy(ctx, grad, dy);
  Tensor grad_c = channel_major(grad, last);
  for (size_t l = num_children(); l-- > 0;) {
    const int64_t channels = in_ + static_cast<int64_t>(l) * growth_;
    Module& layer = child(l);
    Tensor d_out = empty_on(ctx, maps_shape(x_shape_, growth_, last));
    Tensor d_out_c = channel_major(d_out, last);
    ops::copy_channels(ctx, d_out_c, 0, grad_c, channels, growth_, ops::DxMode::overwrite);
    if (const Head h = head_of(layer); h.norm && h.relu->output().defined()) {
      const size_t n = layer.num_children();
      for (size_t i = 2; i < n; ++i) layer.child(i).set_input_grad_needed(true);
      // conv1's dx, the batch norm's dy, in the precision backward_children over the whole layer
      // would hand it (backward_dx_dtype: the compute's half type under --precision bf16|fp16, the
      // batch norm and ReLU before conv1 having run as one), which batch_norm_backward reads widened.
      const DType d_y_dtype = n > 2 ? backward_dx_dtype(ctx, layer, 0, 2) : DType::f32;
      const Tensor d_y = backward_children(ctx, layer, 2, n, d_out, nullptr, d_y_dtype);
      h.norm->backward_prefix(ctx, grad, d_y, &h.relu->output());
      h.relu->clear_cache();
    } else {
      layer.set_input_grad_needed(true);
      const Tensor d_input = layer.backward(ctx, d_out);  // the channels it read
      ops::copy_channels(ctx, grad_c, 0, channel_major(d_input, last), 0, channels, ops::DxMode::add);
    }
  }
  Tensor dx = empty_on(ctx, maps_shape(x_shape_, in_, last));
  Tensor dx_c = channel_major(dx, last);
  ops::copy_channels(ctx, dx_c, 0, grad_c, 0, in_, ops::DxMode::overwrite);
  return dx;
}

}  // namespace dpx::nn
