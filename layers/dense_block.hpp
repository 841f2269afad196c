// DenseNet's building blocks as torchvision.models.densenet builds them: the dense layer
// (BN-ReLU-conv 1x1 bottleneck, BN-ReLU-conv 3x3 to `growth` channels), the dense block (each
// layer sees every earlier feature map, concatenated along channels) and the transition.
#pragma once
#include <memory>

#include "core/rng.hpp"
#include "layers/module.hpp"
#include "layers/sequential.hpp"

namespace dpx::nn {

// torchvision's _DenseLayer: children norm1, relu1, conv1 (1x1 to bn_size * growth, no bias),
// norm2, relu2, conv2 (3x3 pad 1 to growth, no bias), and "dropout" when drop_rate > 0.
// Its input is the concatenation the block hands it: (N, C_in, H, W) -> (N, growth, H, W).
std::unique_ptr<Sequential> dense_layer(int64_t in_channels, int64_t growth, int64_t bn_size,
                                        float drop_rate, Rng& rng);

// torchvision's _Transition: children norm, relu, conv (1x1, no bias), pool (AvgPool2d 2x2).
std::unique_ptr<Sequential> dense_transition(int64_t in_channels, int64_t out_channels, Rng& rng);

// torchvision's _DenseBlock: children denselayer1..denselayerL; layer l gets C_in + (l-1)
// growth channels (the block input and every earlier layer's output, in that order) and the
// block returns all of them concatenated: (N, C_in, H, W) -> (N, C_in + L growth, H, W).
class DenseBlock : public Cloneable<DenseBlock> {
 public:
  DenseBlock(int num_layers, int64_t in_channels, int64_t bn_size, int64_t growth, float drop_rate,
             Rng& rng);

  // The features in one buffer, each layer's output copied in once (no concatenation per layer);
  // the buffer is the output.
  Tensor forward(Context& ctx, const Tensor& x) override;
  // One gradient buffer: each layer, from the last, takes its output's channels out of it and
  // adds its input gradient onto the channels it read.
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "DenseBlock"; }
  std::string describe() const override;
  // Channels-last: the buffer is (N, H, W, C), its channels cut as rows (N*H*W, C); the layers'
  // batch norms read its prefix as rows too.
  bool set_channels_last(bool on) override {
    channels_last_ = on;
    return true;
  }

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return in_ + static_cast<int64_t>(num_children()) * growth_; }

 private:
  int64_t in_, growth_;
  bool channels_last_ = false;
  Shape x_shape_;  // (N, C_in, H, W) of the last forward
};

}  // namespace dpx::nn
