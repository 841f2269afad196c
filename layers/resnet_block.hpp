// ResNet's residual blocks as torchvision.models.resnet builds them: BasicBlock (two 3x3
// convolutions) and Bottleneck (1x1, 3x3 with the stride, 1x1 to 4x the width), each with a
// "downsample" branch (1x1 convolution with the stride, batch norm) when the shape changes.
#pragma once
#include <memory>

#include "core/rng.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

// The forward and backward both blocks share. Children: the residual branch (run in order),
// then "downsample" (a Sequential, only when stride != 1 or C_in != C_out), then the ReLU
// after the join: y = relu(branch(x) + downsample(x) or x), the join and the ReLU in one pass
// (ops::add_relu; the ReLU keeps y for its backward). torchvision applies one ReLU
// module at every place; here each application is a module of its own (a ReLU keeps its own
// output for backward). ReLUs have no parameters, so the state_dict is torchvision's.
template <class Self>
class ResNetBlock : public Cloneable<Self> {
 public:
  Tensor forward(Context& ctx, const Tensor& x) override;    // (N, C_in, H, W) -> (N, C_out, H', W')
  // dx = the branch's dx + the identity path's; without a caller for dx (input_grad_needed()
  // false) only parameter gradients are computed and dx is undefined.
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string describe() const override;
  // x is its convolutions' operand and, without a downsample, add_relu's b.
  bool takes_half_maps() const override { return true; }
  // Its children compute; the block adds and checks the input's channels where they lie.
  bool set_channels_last(bool on) override {
    channels_last_ = on;
    return true;
  }

  // Whether another block reads this block's output next (zoo/resnet.cpp sets it for every block
  // but the model's last): under --precision bf16|fp16 (Context::half_maps) the output is then in
  // that precision, the next block's convolutions' operand and its identity (kernels/ops.def,
  // "half-precision maps").
  void set_output_read_by_block(bool on) { output_read_by_block_ = on; }
  bool output_read_by_block() const { return output_read_by_block_; }

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  int stride() const { return stride_; }
  bool has_downsample() const { return stride_ != 1 || in_ != out_; }

 protected:
  ResNetBlock(int64_t in_channels, int64_t out_channels, int stride);
  // Called by the constructors once the branch's children are registered: adds the
  // downsample (when needed) and the final ReLU under the given name.
  void finish(const std::string& final_relu_name, Rng& rng);

 private:
  Module& final_relu() { return this->child(this->num_children() - 1); }

  int64_t in_, out_;
  int stride_;
  size_t branch_ = 0;  // children [0, branch_) are the residual branch
  bool channels_last_ = false;
  bool output_read_by_block_ = false;
};

// torchvision's BasicBlock (expansion 1): conv1 3x3 (stride), bn1, relu1, conv2 3x3, bn2.
class BasicBlock final : public ResNetBlock<BasicBlock> {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t inplanes, int64_t planes, int stride, Rng& rng);
  std::string type_name() const override { return "BasicBlock"; }
};

// torchvision's Bottleneck (expansion 4, the stride on the 3x3 as in "ResNet v1.5"): conv1
// 1x1, bn1, relu1, conv2 3x3 (stride), bn2, relu2, conv3 1x1 to 4 planes, bn3.
class Bottleneck final : public ResNetBlock<Bottleneck> {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t inplanes, int64_t planes, int stride, Rng& rng);
  std::string type_name() const override { return "Bottleneck"; }
};

extern template class ResNetBlock<BasicBlock>;
extern template class ResNetBlock<Bottleneck>;

}  // namespace dpx::nn
