// Pooling layers over NCHW input: MaxPool2d, AvgPool2d (torch.nn semantics, including
// ceil_mode and count_include_pad) and AdaptiveAvgPool2d. They have no parameters.
#pragma once
#include "kernels/ops.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

class MaxPool2d : public Cloneable<MaxPool2d> {
 public:
  // stride 0 means stride = kernel (torch's stride=None).
  explicit MaxPool2d(int kernel, int stride = 0, int padding = 0, bool ceil_mode = false);
  explicit MaxPool2d(const ops::Pool2dParams& p);  // rectangular windows

  Tensor forward(Context& ctx, const Tensor& x) override;    // (N, C, H, W) -> (N, C, OH, OW)
  // forward, y in `y_dtype`: f32, or ctx.compute's bf16/fp16 for a module that takes
  // half-precision maps next (nn::forward_children decides). x may be in it too; backward needs
  // only the argmax.
  Tensor forward(Context& ctx, const Tensor& x, DType y_dtype);
  // Routes dy to each window's max; dy may be in ctx.compute's bf16/fp16 (the gradient of a
  // convolution after the pool), and the second form writes dx in `dx_dtype` (the gradient of a
  // ReLU after a convolution before it, in half precision: nn::backward_dx_dtype decides).
  Tensor backward(Context& ctx, const Tensor& dy) override;
  Tensor backward(Context& ctx, const Tensor& dy, DType dx_dtype);
  std::string type_name() const override { return "MaxPool2d"; }
  std::string describe() const override;
  void clear_cache() override { argmax_ = Tensor(); }
  bool set_channels_last(bool on) override {  // (N, H, W, C) -> (N, OH, OW, C)
    p_.format = on ? ops::MemoryFormat::channels_last : ops::MemoryFormat::contiguous;
    return true;
  }
  const ops::Pool2dParams& params() const { return p_; }

 private:
  ops::Pool2dParams p_;
  Shape x_shape_;  // (N, C, H, W)
  Tensor argmax_;  // (N, C, OH, OW) i32: flat h*W+w index of each window's maximum
};

class AvgPool2d : public Cloneable<AvgPool2d> {
 public:
  explicit AvgPool2d(int kernel, int stride = 0, int padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  explicit AvgPool2d(const ops::Pool2dParams& p);

  Tensor forward(Context& ctx, const Tensor& x) override;    // (N, C, H, W) -> (N, C, OH, OW)
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string describe() const override;
  bool set_channels_last(bool on) override {  // (N, H, W, C) -> (N, OH, OW, C)
    p_.format = on ? ops::MemoryFormat::channels_last : ops::MemoryFormat::contiguous;
    return true;
  }
  const ops::Pool2dParams& params() const { return p_; }

 private:
  ops::Pool2dParams p_;
  Shape x_shape_;  // (N, C, H, W); backward needs nothing else
};

// Averages each of out_h x out_w bins, bins as PyTorch: [floor(i*H/OH), ceil((i+1)*H/OH)).
class AdaptiveAvgPool2d : public Cloneable<AdaptiveAvgPool2d> {
 public:
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w);

  Tensor forward(Context& ctx, const Tensor& x) override;    // (N, C, H, W) -> (N, C, out_h, out_w)
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string describe() const override;
  bool set_channels_last(bool on) override {  // (N, H, W, C) -> (N, out_h, out_w, C)
    format_ = on ? ops::MemoryFormat::channels_last : ops::MemoryFormat::contiguous;
    return true;
  }

 private:
  int64_t out_h_, out_w_;
  ops::MemoryFormat format_ = ops::MemoryFormat::contiguous;
  Shape x_shape_;  // (N, C, H, W)
};

}  // namespace dpx::nn
