// SqueezeNet's Fire module as torchvision.models.squeezenet builds it: a 1x1 "squeeze"
// convolution, then 1x1 and 3x3 "expand" convolutions side by side, concatenated on channels.
#pragma once
#include "core/rng.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

// Children (torchvision's names): squeeze, squeeze_activation, expand1x1,
// expand1x1_activation, expand3x3 (pad 1), expand3x3_activation; every convolution has a bias.
// (N, C_in, H, W) -> (N, e1 + e3, H, W): [relu(expand1x1(s)), relu(expand3x3(s))] with
// s = relu(squeeze(x)).
class Fire : public Cloneable<Fire> {
 public:
  Fire(int64_t inplanes, int64_t squeeze_planes, int64_t expand1x1_planes, int64_t expand3x3_planes,
       Rng& rng);

  Tensor forward(Context& ctx, const Tensor& x) override;
  // Splits dy between the two expand branches and joins their gradients at s.
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "Fire"; }
  bool takes_half_maps() const override { return true; }  // x is the squeeze convolution's operand
  std::string describe() const override;
  // Its convolutions compute; it checks the input's channels and joins the branches where the
  // channels lie (channels-last: along the last dimension).
  bool set_channels_last(bool on) override {
    channels_last_ = on;
    return true;
  }

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return e1_ + e3_; }

 private:
  int64_t in_, squeeze_, e1_, e3_;
  bool channels_last_ = false;
  Shape y_shape_;  // (N, e1 + e3, H, W) of the last forward
};

}  // namespace dpx::nn
