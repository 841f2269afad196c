// SqueezeExcitation (torchvision.ops.SqueezeExcitation): per-channel gates from global context,
// y = x * sigmoid(fc2(act(fc1(avgpool(x))))), with 1x1 convolutions as fc1 and fc2. The
// backward adds the gate's path (through the pooled context) to the direct one.
#pragma once
#include <memory>

#include "core/rng.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

class SqueezeExcitation : public Cloneable<SqueezeExcitation> {
 public:
  // Children avgpool, fc1 (C -> S, 1x1), fc2 (S -> C, 1x1), activation, scale_activation
  // (Sigmoid), in torchvision's order. activation: null gives torchvision's default ReLU;
  // EfficientNet's MBConv passes SiLU.
  SqueezeExcitation(int64_t input_channels, int64_t squeeze_channels, Rng& rng,
                    std::unique_ptr<Module> activation = nullptr);

  Tensor forward(Context& ctx, const Tensor& x) override;  // (N, C, H, W) -> (N, C, H, W)
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "SqueezeExcitation"; }
  std::string describe() const override;
  void clear_cache() override;
  // Channels-last: x (N, H, W, C), the gates (N, 1, 1, C) from its (channels-last) children; the
  // broadcasting product does not care.
  bool set_channels_last(bool on) override {
    channels_last_ = on;
    return true;
  }

  int64_t input_channels() const { return c_; }
  int64_t squeeze_channels() const { return s_; }

 private:
  int64_t c_, s_;
  bool channels_last_ = false;
  Tensor x_;      // (N, C, H, W): forward's input (shared, not copied)
  Tensor scale_;  // (N, C, 1, 1): the gates of the last forward
};

}  // namespace dpx::nn
