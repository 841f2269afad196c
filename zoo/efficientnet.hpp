// EfficientNet (v1) as torchvision builds it (torchvision.models.efficientnet_b0): the stage
// table it shares with B1-B7 (here at width and depth 1), so tests and studies can build
// smaller variants, and the builder, with torchvision's state_dict names.
#pragma once
#include <memory>
#include <vector>

#include "layers/mbconv.hpp"
#include "layers/module.hpp"
#include "zoo/registry.hpp"

namespace dpx::zoo {

struct EfficientNetStage {
  nn::MBConvConfig block;  // the first block's; later ones take stride 1 and C_in = C_out
  int num_layers = 1;
};

struct EfficientNetConfig {
  std::vector<EfficientNetStage> stages;  // torchvision's inverted_residual_setting
  float dropout = 0.2f;                   // before the classifier's Linear
  float stochastic_depth_prob = 0.2f;     // block k of K gets p k / K
  int64_t last_channel = 0;               // 0: 4 x the last stage's out_channels (B0: 1280)
  nn::NormOptions norm;                   // B0 keeps torch's BatchNorm2d defaults
};

EfficientNetConfig efficientnet_b0_config();

// torchvision.models.EfficientNet: children features (stem conv 3x3 stride 2, the MBConv
// stages, head conv 1x1), avgpool, flatten, classifier (Dropout, Linear). Input
// (N, in_channels, S, S), output (N, num_classes). Convolutions ~ kaiming_normal(fan_out),
// Linear ~ U(+-1/sqrt(out_features)), biases 0, as torchvision initialises them.
std::unique_ptr<nn::Module> build_efficientnet(const EfficientNetConfig& config, const ModelOptions& options);

}  // namespace dpx::zoo
