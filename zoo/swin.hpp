// Swin Transformer v1 as torchvision builds it (torchvision.models.swin_t / swin_s / swin_b):
// the configuration those three share, so tests and studies can build smaller variants, and
// the builder. Every parameter and buffer carries torchvision's state_dict name.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "layers/module.hpp"
#include "zoo/registry.hpp"

namespace dpx::zoo {

struct SwinConfig {
  int64_t patch_size = 4;
  int64_t embed_dim = 96;
  std::vector<int64_t> depths = {2, 2, 6, 2};  // blocks per stage
  std::vector<int64_t> num_heads = {3, 6, 12, 24};
  std::array<int64_t, 2> window_size = {7, 7};
  double mlp_ratio = 4.0;
  float stochastic_depth_prob = 0.2f;  // reached by the last block, linearly from 0
};

SwinConfig swin_t_config();  // embed 96, depths 2-2-6-2, heads 3-6-12-24, depth drop 0.2
SwinConfig swin_s_config();  // embed 96, depths 2-2-18-2, heads 3-6-12-24, depth drop 0.3
SwinConfig swin_b_config();  // embed 128, depths 2-2-18-2, heads 4-8-16-32, depth drop 0.5

// torchvision.models.SwinTransformer: children features (patch embedding, then stages of
// SwinTransformerBlock with PatchMerging between them), norm, permute, avgpool, flatten, head.
// Input (N, in_channels, S, S), output (N, num_classes). Linear weights and the position bias
// tables ~ trunc_normal(std 0.02), Linear biases 0, as torchvision initialises them.
std::unique_ptr<nn::Module> build_swin(const SwinConfig& config, const ModelOptions& options);

}  // namespace dpx::zoo
