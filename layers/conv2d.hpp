// Conv2d: 2-D convolution over NCHW input (torch.nn.Conv2d), with stride, zero padding,
// dilation and groups, square or rectangular. The arithmetic is ops::conv2d_forward/backward.
#pragma once
#include "core/rng.hpp"
#include "kernels/ops.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

// Every knob of a convolution, for rectangular kernels and the like:
// Conv2d(192, 192, {.kernel_h = 1, .kernel_w = 7, .pad_w = 3}, rng).
struct Conv2dOptions {
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
  bool bias = true;
};

class Conv2d : public Cloneable<Conv2d> {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, const Conv2dOptions& options, Rng& rng);
  // The square form torchvision uses: Conv2d(3, 64, 7, rng, /*stride=*/2, /*padding=*/3).
  Conv2d(int64_t in_channels, int64_t out_channels, int kernel, Rng& rng, int stride = 1,
         int padding = 0, int dilation = 1, int groups = 1, bool bias = true);

  Tensor forward(Context& ctx, const Tensor& x) override;    // (N, C_in, H, W) -> (N, C_out, OH, OW)
  bool takes_half_maps() const override { return true; }  // x is its operand
  // forward, with the op's epilogue applied to the output: Epilogue::relu gives max(conv(x), 0)
  // (in the pass that adds the bias where the kernel can, else in a pass in place after it; a
  // ReLU after it then keeps that output: nn::forward_children).
  // `y_dtype`: the output's, f32 or, for a convolution that reads it next, ctx.compute's bf16/fp16
  // (ops.def, "half-precision maps"; nn::forward_children decides).
  Tensor forward(Context& ctx, const Tensor& x, ops::Epilogue epilogue, DType y_dtype = DType::f32);
  // forward, for a batch norm that reads the output next and nothing else: under --precision
  // bf16|fp16 (ctx.compute, with ctx.half_maps) the output is in that precision, as cuDNN computes
  // it (a bias added to it in place), rather than widened to fp32 (ops.def, "half-precision maps");
  // the batch norm's backward then hands back a gradient in the same precision, which backward
  // takes as it is (the bias gradient summing its values).
  Tensor forward_to_norm(Context& ctx, const Tensor& x);
  Tensor backward(Context& ctx, const Tensor& dy) override;  // (N, C_out, OH, OW) -> (N, C_in, H, W)
  // backward with dx in `dx_dtype`: f32, or under --precision bf16|fp16 the compute's half type
  // (cuDNN's result as it is) for a ReLU, a max pool or a batch norm before the convolution that
  // reads it next (ops.def, "half-precision maps"; nn::backward_dx_dtype decides).
  Tensor backward(Context& ctx, const Tensor& dy, DType dx_dtype);
  // dx added into `into` by the op itself (DxMode::add: the CPU's GEMM beta; on CUDA the pass that
  // widens a half-precision result, or in fp32 an add of cuDNN's fresh result, kernels/cuda/conv2d.cu):
  // a ResNet block's join of its two paths' gradients, Fire's of its two branches'.
  void backward_add(Context& ctx, const Tensor& dy, Tensor& into) override;
  std::string type_name() const override { return "Conv2d"; }
  std::string describe() const override;
  void clear_cache() override { x_ = Tensor(); }
  // Channels-last: x (N, H, W, C_in) -> (N, OH, OW, C_out); the weight keeps its layout.
  bool set_channels_last(bool on) override {
    format_ = on ? ops::MemoryFormat::channels_last : ops::MemoryFormat::contiguous;
    return true;
  }
  // 2 N C_out OH OW (C_in / groups) kH kW: the multiply-adds of the last forward, bias not counted.
  int64_t last_forward_flops() const override { return last_flops_; }

  // W, b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C_in / groups * kH * kW
  // (torch.nn.Conv2d.reset_parameters).
  void reset_parameters(Rng& rng);

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  const Conv2dOptions& options() const { return opt_; }
  Parameter& weight() { return param(0); }                           // (C_out, C_in/groups, kH, kW)
  Parameter* bias() { return opt_.bias ? &param(1) : nullptr; }     // (C_out)
  // Output shape for an input shape (N, C_in, H, W) (channels-last: (N, H, W, C_in)); throws naming
  // the layer when it is empty.
  Shape output_shape(const Shape& x_shape) const;

 private:
  ops::Conv2dParams kernel_params(ops::Epilogue epilogue = ops::Epilogue::none) const;
  // backward's and backward_add's work: dx (if given) written over or added into.
  void backward_into(Context& ctx, const Tensor& dy, Tensor* dx, ops::DxMode dx_mode);

  int64_t in_, out_;
  Conv2dOptions opt_;
  ops::MemoryFormat format_ = ops::MemoryFormat::contiguous;
  Tensor x_;  // (N, C_in, H, W): forward's input (shared, not copied), for dW and dx's shape
  int64_t last_flops_ = 0;
};

}  // namespace dpx::nn
