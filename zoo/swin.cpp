// Swin Transformer v1 builders (swin_t, swin_s, swin_b) after torchvision 0.14's
// swin_transformer.py: patch embedding (conv patch x patch, stride patch; to channels-last;
// LayerNorm), stages of shifted-window blocks joined by patch merging, then norm, pool, head.
#include "zoo/swin.hpp"

#include "layers/layer_util.hpp"
#include "layers/layers.hpp"
#include "zoo/families.hpp"

namespace dpx::zoo {

SwinConfig swin_t_config() { return {}; }

SwinConfig swin_s_config() {
  SwinConfig c;
  c.depths = {2, 2, 18, 2};
  c.stochastic_depth_prob = 0.3f;
  return c;
}

SwinConfig swin_b_config() {
  SwinConfig c;
  c.embed_dim = 128;
  c.depths = {2, 2, 18, 2};
  c.num_heads = {4, 8, 16, 32};
  c.stochastic_depth_prob = 0.5f;
  return c;
}

std::unique_ptr<nn::Module> build_swin(const SwinConfig& c, const ModelOptions& o) {
  if (c.depths.empty() || c.depths.size() != c.num_heads.size())
    usage_fail("swin: depths and num_heads must be non-empty and of the same length");
  Rng rng(o.seed);
  auto features = std::make_unique<nn::Sequential>();
  auto embed = std::make_unique<nn::Sequential>();
  embed->emplace<nn::Conv2d>(o.in_channels, c.embed_dim, static_cast<int>(c.patch_size), rng,
                             static_cast<int>(c.patch_size));
  embed->emplace<nn::Permute>(std::vector<int>{0, 2, 3, 1});  // NCHW -> (N, H, W, C)
  embed->emplace<nn::LayerNorm>(c.embed_dim);
  features->add(std::move(embed));

  int64_t total_blocks = 0;
  for (int64_t d : c.depths) total_blocks += d;
  int64_t block_id = 0, dim = c.embed_dim;
  for (size_t stage = 0; stage < c.depths.size(); ++stage) {
    auto blocks = std::make_unique<nn::Sequential>();
    for (int64_t i = 0; i < c.depths[stage]; ++i, ++block_id) {
      // torchvision: p * id / (total - 1), so the last block gets p (a lone block gets 0).
      const float p = total_blocks > 1 ? c.stochastic_depth_prob * static_cast<float>(block_id) /
                                             static_cast<float>(total_blocks - 1)
                                       : 0.f;
      const std::array<int64_t, 2> shift =
          i % 2 == 0 ? std::array<int64_t, 2>{0, 0}
                     : std::array<int64_t, 2>{c.window_size[0] / 2, c.window_size[1] / 2};
      blocks->emplace<nn::SwinTransformerBlock>(dim, c.num_heads[stage], c.window_size, shift, rng,
                                                c.mlp_ratio, p);
    }
    features->add(std::move(blocks));
    if (stage + 1 < c.depths.size()) {
      features->emplace<nn::PatchMerging>(dim, rng);
      dim *= 2;
    }
  }

  auto model = std::make_unique<nn::Sequential>();
  model->add("features", std::move(features));
  model->add("norm", std::make_unique<nn::LayerNorm>(dim));
  model->add("permute", std::make_unique<nn::Permute>(std::vector<int>{0, 3, 1, 2}));
  model->add("avgpool", std::make_unique<nn::AdaptiveAvgPool2d>(1, 1));
  model->add("flatten", std::make_unique<nn::Flatten>());
  model->add("head", std::make_unique<nn::Linear>(dim, o.num_classes, rng));
  // torchvision's last word on every Linear (the MLPs' xavier init included).
  for (auto& [name, m] : model->named_modules())
    if (auto* fc = dynamic_cast<nn::Linear*>(m)) {
      nn::init_trunc_normal(fc->weight().value, rng, 0.02f);
      if (fc->bias()) nn::init_constant(fc->bias()->value, 0.f);
    }
  return model;
}

void add_swin_models(std::vector<ModelInfo>& out) {
  const std::string note =
      "the 4x4 patch embedding needs 4 pixels; smaller maps are padded to the 7x7 window and odd "
      "sizes before each patch merging, as torchvision does";
  out.push_back({.name = "swin_t",
                 .family = "swin",
                 .default_image_size = 224,
                 .default_in_channels = 3,
                 .min_image_size = 4,
                 .note = note,
                 .build = [](const ModelOptions& o) { return build_swin(swin_t_config(), o); },
                 .classifier = "head"});
  out.push_back({.name = "swin_s",
                 .family = "swin",
                 .default_image_size = 224,
                 .default_in_channels = 3,
                 .min_image_size = 4,
                 .note = note,
                 .build = [](const ModelOptions& o) { return build_swin(swin_s_config(), o); },
                 .classifier = "head"});
  out.push_back({.name = "swin_b",
                 .family = "swin",
                 .default_image_size = 224,
                 .default_in_channels = 3,
                 .min_image_size = 4,
                 .note = note,
                 .build = [](const ModelOptions& o) { return build_swin(swin_b_config(), o); },
                 .classifier = "head"});
}

}  // namespace dpx::zoo
