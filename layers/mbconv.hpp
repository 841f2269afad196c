// EfficientNet's building blocks, as torchvision.models.efficientnet builds them: the
// Conv2dNormActivation triple (conv, batch norm, optional activation) and MBConv (expand 1x1,
// depthwise kxk, squeeze-excitation, project 1x1; residual with stochastic depth).
#pragma once
#include <memory>

#include "core/rng.hpp"
#include "layers/module.hpp"
#include "layers/sequential.hpp"

namespace dpx::nn {

struct NormOptions {
  float eps = 1e-5f, momentum = 0.1f;  // torch.nn.BatchNorm2d's defaults (EfficientNet-B0's)
};

// torchvision.ops.Conv2dNormActivation: children "0" Conv2d (padding (k-1)/2, no bias), "1"
// BatchNorm2d and, when `activation` is given, "2" that activation.
std::unique_ptr<Sequential> conv_norm_activation(int64_t in_channels, int64_t out_channels, int kernel,
                                                 int stride, int groups, std::unique_ptr<Module> activation,
                                                 const NormOptions& norm, Rng& rng);

// torchvision.models._utils._make_divisible: the nearest multiple of divisor (at least
// divisor), rounded up when rounding would lose more than 10%.
int64_t make_divisible(double v, int64_t divisor);

struct MBConvConfig {
  double expand_ratio = 1;
  int kernel = 3, stride = 1;
  int64_t input_channels = 0, out_channels = 0;
};

class MBConv : public Cloneable<MBConv> {
 public:
  // Children "block" (Sequential: [expand,] depthwise, SE with SiLU and squeeze channels
  // max(1, in / 4), project) and "stochastic_depth" (row mode), as torchvision's MBConv.
  MBConv(const MBConvConfig& cnf, float stochastic_depth_prob, Rng& rng, const NormOptions& norm = {});

  Tensor forward(Context& ctx, const Tensor& x) override;  // (N, C_in, H, W) -> (N, C_out, H', W')
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "MBConv"; }
  std::string describe() const override;
  // Its children compute; the block adds, and checks the input's channels where they lie.
  bool set_channels_last(bool on) override {
    channels_last_ = on;
    return true;
  }

  const MBConvConfig& config() const { return cnf_; }
  bool use_res_connect() const { return use_res_; }  // stride 1 and C_in == C_out

 private:
  MBConvConfig cnf_;
  bool use_res_;
  bool channels_last_ = false;
};

}  // namespace dpx::nn
