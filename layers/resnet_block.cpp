// BasicBlock and Bottleneck: construction with torchvision's child names, and the shared
// residual forward/backward (the branch and the identity path meet at an addition).
#include "layers/resnet_block.hpp"

#include "layers/batch_norm.hpp"
#include "layers/conv2d.hpp"
#include "layers/layer_util.hpp"
#include "layers/activation.hpp"
#include "layers/residual.hpp"
#include "layers/sequential.hpp"

namespace dpx::nn {

namespace {
// torchvision's conv3x3 and conv1x1: no bias, since a batch norm follows.
std::unique_ptr<Conv2d> conv3x3(int64_t in, int64_t out, int stride, Rng& rng) {
  return std::make_unique<Conv2d>(in, out, 3, rng, stride, /*padding=*/1, 1, 1, /*bias=*/false);
}
std::unique_ptr<Conv2d> conv1x1(int64_t in, int64_t out, int stride, Rng& rng) {
  return std::make_unique<Conv2d>(in, out, 1, rng, stride, 0, 1, 1, /*bias=*/false);
}
}  // namespace

template <class Self>
ResNetBlock<Self>::ResNetBlock(int64_t in_channels, int64_t out_channels, int stride)
    : in_(in_channels), out_(out_channels), stride_(stride) {
  if (in_channels < 1 || out_channels < 1 || stride < 1)
    fail("ResNet block (", in_channels, " -> ", out_channels, ", stride ", stride,
         "): channels and stride must be positive");
}

template <class Self>
void ResNetBlock<Self>::finish(const std::string& final_relu_name, Rng& rng) {
  branch_ = this->num_children();
  if (has_downsample()) {
    auto down = std::make_unique<Sequential>();
    down->add(conv1x1(in_, out_, stride_, rng));
    down->add(std::make_unique<BatchNorm2d>(out_));
    this->add_module("downsample", std::move(down));
  }
  this->add_module(final_relu_name, std::make_unique<ReLU>());
}

template <class Self>
std::string ResNetBlock<Self>::describe() const {
  return detail::concat(this->type_name(), "(", in_, " -> ", out_, ", stride ", stride_,
                        has_downsample() ? ", downsample" : "", ")");
}

template <class Self>
Tensor ResNetBlock<Self>::forward(Context& ctx, const Tensor& x) {
  if (x.dim() != 4 || x.size(channels_last_ ? 3 : 1) != in_)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected ", expected_maps(in_, channels_last_));
  Tensor h = forward_children(ctx, *this, 0, branch_, x);  // bn + relu pairs in one pass
  Tensor identity = has_downsample() ? this->child(branch_).forward(ctx, x) : x;
  // The join and the final ReLU in one pass, which the ReLU keeps as its output (its backward
  // reads it); in half precision where the next block reads it.
  const bool half = output_read_by_block_ && ctx.compute != DType::f32 && ctx.half_maps;
  const Tensor y = residual_add_relu(ctx, identity, h, describe(), half ? ctx.compute : DType::f32);
  return static_cast<ReLU&>(final_relu()).forward_applied(y);
}

template <class Self>
Tensor ResNetBlock<Self>::backward(Context& ctx, const Tensor& dy) {
  const bool need_dx = this->input_grad_needed();
  Tensor g = final_relu().backward(ctx, dy);  // the sum's gradient, which reaches both paths
  // The downsample's parameters were registered last, so they are announced first: reverse
  // registration order, the order DDP's buckets fill in.
  Tensor d_identity = g;
  if (has_downsample()) {
    this->child(branch_).set_input_grad_needed(need_dx);
    d_identity = this->child(branch_).backward(ctx, g);
  }
  this->child(0).set_input_grad_needed(need_dx);  // conv1: dx only if wanted
  if (!need_dx) {
    backward_children(ctx, *this, 0, branch_, g);  // relu + bn pairs as one
    return Tensor();
  }
  // The join's backward: conv1 adds its dx into the identity path's gradient (a tensor of the
  // block's own: the final ReLU's or the downsample's fresh dx, which bn3's backward has read by
  // then), the op's DxMode::add in place of a pass of its own.
  return backward_children(ctx, *this, 0, branch_, g, &d_identity);
}

BasicBlock::BasicBlock(int64_t inplanes, int64_t planes, int stride, Rng& rng)
    : ResNetBlock(inplanes, planes * kExpansion, stride) {
  add_module("conv1", conv3x3(inplanes, planes, stride, rng));
  add_module("bn1", std::make_unique<BatchNorm2d>(planes));
  add_module("relu1", std::make_unique<ReLU>());
  add_module("conv2", conv3x3(planes, planes, 1, rng));
  add_module("bn2", std::make_unique<BatchNorm2d>(planes));
  finish("relu2", rng);
}

Bottleneck::Bottleneck(int64_t inplanes, int64_t planes, int stride, Rng& rng)
    : ResNetBlock(inplanes, planes * kExpansion, stride) {
  add_module("conv1", conv1x1(inplanes, planes, 1, rng));
  add_module("bn1", std::make_unique<BatchNorm2d>(planes));
  add_module("relu1", std::make_unique<ReLU>());
  add_module("conv2", conv3x3(planes, planes, stride, rng));
  add_module("bn2", std::make_unique<BatchNorm2d>(planes));
  add_module("relu2", std::make_unique<ReLU>());
  add_module("conv3", conv1x1(planes, planes * kExpansion, 1, rng));
  add_module("bn3", std::make_unique<BatchNorm2d>(planes * kExpansion));
  finish("relu3", rng);
}

template class ResNetBlock<BasicBlock>;
template class ResNetBlock<Bottleneck>;

}  // namespace dpx::nn
