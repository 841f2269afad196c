// DenseNet-121/161/169/201 (DenseNet-BC) after torchvision 0.14's densenet.py: a 7x7 stem, four
// dense blocks joined by halving transitions, a final batch norm, ReLU, global pooling and one
// Linear; convolutions drawn from kaiming_normal (fan_in), the Linear's bias 0.
#include "layers/layer_util.hpp"
#include "layers/layers.hpp"
#include "zoo/cnn.hpp"
#include "zoo/families.hpp"

namespace dpx::zoo {

DenseNetConfig densenet_config(int depth) {
  DenseNetConfig c;
  switch (depth) {
    case 121: c.blocks = {6, 12, 24, 16}; break;
    case 161:
      c.growth = 48;
      c.blocks = {6, 12, 36, 24};
      c.init_features = 96;
      break;
    case 169: c.blocks = {6, 12, 32, 32}; break;
    case 201: c.blocks = {6, 12, 48, 32}; break;
    default: usage_fail("densenet: no depth ", depth, " in torchvision (121, 161, 169 or 201)");
  }
  return c;
}

std::unique_ptr<nn::Module> build_densenet(const DenseNetConfig& c, const ModelOptions& o) {
  if (c.blocks.empty() || c.growth < 1 || c.init_features < 1 || c.bn_size < 1)
    usage_fail("densenet: blocks must be non-empty and growth, init_features and bn_size positive");
  Rng rng(o.seed);
  auto features = std::make_unique<nn::Sequential>();
  features->add("conv0", std::make_unique<nn::Conv2d>(o.in_channels, c.init_features, 7, rng, 2, 3, 1, 1, false));
  features->add("norm0", std::make_unique<nn::BatchNorm2d>(c.init_features));
  features->add("relu0", std::make_unique<nn::ReLU>());
  features->add("pool0", std::make_unique<nn::MaxPool2d>(3, 2, 1));
  int64_t channels = c.init_features;
  for (size_t i = 0; i < c.blocks.size(); ++i) {
    auto block = std::make_unique<nn::DenseBlock>(c.blocks[i], channels, c.bn_size, c.growth, c.drop_rate, rng);
    channels = block->out_channels();
    features->add("denseblock" + std::to_string(i + 1), std::move(block));
    if (i + 1 < c.blocks.size()) {
      features->add("transition" + std::to_string(i + 1), nn::dense_transition(channels, channels / 2, rng));
      channels /= 2;
    }
  }
  features->add("norm5", std::make_unique<nn::BatchNorm2d>(channels));

  auto m = std::make_unique<nn::Sequential>();
  m->add("features", std::move(features));
  m->add("relu", std::make_unique<nn::ReLU>());  // F.relu, F.adaptive_avg_pool2d and
  m->add("avgpool", std::make_unique<nn::AdaptiveAvgPool2d>(1, 1));  // torch.flatten in
  m->add("flatten", std::make_unique<nn::Flatten>());                // torchvision's forward
  m->add("classifier", std::make_unique<nn::Linear>(channels, o.num_classes, rng));
  for (auto& [name, mod] : m->named_modules()) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(mod))
      nn::init_kaiming_normal_fan_in(conv->weight().value, rng);
    else if (auto* fc = dynamic_cast<nn::Linear*>(mod))
      nn::init_constant(fc->bias()->value, 0.f);
  }
  return m;
}

void add_densenet_models(std::vector<ModelInfo>& out) {
  const std::string note =
      "the stem (7x7 stride 2, 3x3 max-pooling stride 2) and three 2x2 average-pooling transitions need 29 "
      "pixels; at 32 the last maps are 1x1, so training needs a batch of 2 or more for batch norm";
  for (int depth : {121, 161, 169, 201})
    out.push_back({.name = "densenet" + std::to_string(depth),
                   .family = "densenet",
                   .default_image_size = 224,
                   .default_in_channels = 3,
                   .min_image_size = 29,
                   .note = note,
                   .build = [depth](const ModelOptions& o) { return build_densenet(densenet_config(depth), o); },
                   .classifier = "classifier"});
}

}  // namespace dpx::zoo
