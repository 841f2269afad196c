// DenseNet's dense layer, transition and dense block. Concatenation and its backward go
// through ops::concat_channels / ops::split_channels_backward, as torch.cat does in torchvision.
#include "layers/dense_block.hpp"

#include "kernels/ops.hpp"
#include "layers/batch_norm.hpp"
#include "layers/conv2d.hpp"
#include "layers/dropout.hpp"
#include "layers/layer_util.hpp"
#include "layers/pooling.hpp"
#include "layers/activation.hpp"

namespace dpx::nn {

namespace {
// torch.cat(parts, 1) into a fresh tensor.
Tensor concat(Context& ctx, const std::vector<Tensor>& parts) {
  Shape shape = parts.front().shape();
  shape[1] = 0;
  for (const Tensor& p : parts) shape[1] += p.size(1);
  Tensor out = Tensor::empty(shape, DType::f32, ctx.device);
  ops::concat_channels(ctx, out, parts);
  return out;
}

std::vector<Tensor*> pointers(std::vector<Tensor>& v, size_t count) {
  std::vector<Tensor*> out;
  for (size_t i = 0; i < count; ++i) out.push_back(&v[i]);
  return out;
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
  if (x.dim() != 4 || x.size(1) != in_)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected (N, ", in_, ", H, W)");
  x_shape_ = x.shape();
  std::vector<Tensor> features{x};
  for (size_t l = 0; l < num_children(); ++l) {
    // The first layer reads x itself (torch.cat of one tensor is a copy of it).
    Tensor input = l == 0 ? x : concat(ctx, features);
    features.push_back(child(l).forward(ctx, input));
  }
  return concat(ctx, features);
}

Tensor DenseBlock::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(!x_shape_.empty(), describe(), ": backward called before forward");
  const Shape y_shape = {x_shape_[0], out_channels(), x_shape_[2], x_shape_[3]};
  if (dy.shape() != y_shape)
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(y_shape));
  // d[0]: the block input's gradient; d[l + 1]: layer l's output's, complete once every later
  // layer has added what it read.
  const size_t layers = num_children();
  std::vector<Tensor> d;
  d.push_back(zeros_on(ctx, x_shape_));
  for (size_t l = 0; l < layers; ++l) d.push_back(zeros_on(ctx, {x_shape_[0], growth_, x_shape_[2], x_shape_[3]}));
  ops::split_channels_backward(ctx, pointers(d, layers + 1), dy);
  for (size_t l = layers; l-- > 0;) {
    Tensor d_input = child(l).backward(ctx, d[l + 1]);  // (N, C_in + l growth, H, W)
    ops::split_channels_backward(ctx, pointers(d, l + 1), d_input);
  }
  return d[0];
}

}  // namespace dpx::nn
