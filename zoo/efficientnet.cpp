// EfficientNet-B0 after torchvision 0.14's efficientnet.py: a stride-2 stem, seven stages of
// MBConv blocks (expand, depthwise, squeeze-excitation, project; stochastic depth growing
// linearly with the block index), a 1x1 head to 1280 channels, pooling, dropout, Linear.
#include "zoo/efficientnet.hpp"

#include <cmath>

#include "layers/layer_util.hpp"
#include "layers/layers.hpp"
#include "zoo/families.hpp"

namespace dpx::zoo {

EfficientNetConfig efficientnet_b0_config() {
  // (expand ratio, kernel, stride, in, out), layers: torchvision's _efficientnet_conf at
  // width_mult = depth_mult = 1, where every channel count is already a multiple of 8.
  EfficientNetConfig c;
  c.stages = {{{1, 3, 1, 32, 16}, 1},  {{6, 3, 2, 16, 24}, 2},  {{6, 5, 2, 24, 40}, 2},
              {{6, 3, 2, 40, 80}, 3},  {{6, 5, 1, 80, 112}, 3}, {{6, 5, 2, 112, 192}, 4},
              {{6, 3, 1, 192, 320}, 1}};
  return c;
}

std::unique_ptr<nn::Module> build_efficientnet(const EfficientNetConfig& c, const ModelOptions& o) {
  if (c.stages.empty()) usage_fail("efficientnet: the stage table must not be empty");
  Rng rng(o.seed);
  auto features = std::make_unique<nn::Sequential>();
  const int64_t stem = c.stages.front().block.input_channels;
  features->add(
      nn::conv_norm_activation(o.in_channels, stem, 3, 2, 1, std::make_unique<nn::SiLU>(), c.norm, rng));
  int64_t total_blocks = 0;
  for (const auto& s : c.stages) total_blocks += s.num_layers;
  int64_t block_id = 0;
  for (const auto& s : c.stages) {
    auto stage = std::make_unique<nn::Sequential>();
    for (int i = 0; i < s.num_layers; ++i, ++block_id) {
      nn::MBConvConfig cnf = s.block;
      if (i > 0) {
        cnf.input_channels = cnf.out_channels;
        cnf.stride = 1;
      }
      // torchvision: p * id / total (not total - 1, unlike Swin).
      const float p =
          c.stochastic_depth_prob * static_cast<float>(block_id) / static_cast<float>(total_blocks);
      stage->emplace<nn::MBConv>(cnf, p, rng, c.norm);
    }
    features->add(std::move(stage));
  }
  const int64_t last_in = c.stages.back().block.out_channels;
  const int64_t last_out = c.last_channel > 0 ? c.last_channel : 4 * last_in;
  features->add(
      nn::conv_norm_activation(last_in, last_out, 1, 1, 1, std::make_unique<nn::SiLU>(), c.norm, rng));

  auto classifier = std::make_unique<nn::Sequential>();
  classifier->emplace<nn::Dropout>(c.dropout, rng);
  classifier->emplace<nn::Linear>(last_out, o.num_classes, rng);
  auto model = std::make_unique<nn::Sequential>();
  model->add("features", std::move(features));
  model->add("avgpool", std::make_unique<nn::AdaptiveAvgPool2d>(1, 1));
  model->add("flatten", std::make_unique<nn::Flatten>());  // torch.flatten(x, 1) in torchvision
  model->add("classifier", std::move(classifier));
  // torchvision's initialisation pass over every module (batch norms are already 1 and 0).
  for (auto& [name, m] : model->named_modules()) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m)) {
      nn::init_kaiming_normal_fan_out(conv->weight().value, rng);
      if (conv->bias()) nn::init_constant(conv->bias()->value, 0.f);
    } else if (auto* fc = dynamic_cast<nn::Linear*>(m)) {
      nn::init_uniform(fc->weight().value, rng, 1.f / std::sqrt(static_cast<float>(fc->out_features())));
      if (fc->bias()) nn::init_constant(fc->bias()->value, 0.f);
    }
  }
  return model;
}

void add_efficientnet_models(std::vector<ModelInfo>& out) {
  out.push_back({.name = "efficientnet_b0",
                 .family = "efficientnet",
                 .default_image_size = 224,
                 .default_in_channels = 3,
                 .min_image_size = 1,
                 .note = "any size works (torchvision's min_size is 1x1); at 32 or less the last maps are 1x1, "
                         "so training needs a batch of 2 or more for batch norm",
                 .build = [](const ModelOptions& o) { return build_efficientnet(efficientnet_b0_config(), o); },
                 .classifier = "classifier"});
}

}  // namespace dpx::zoo
