// VGG-11/13/16/19, with and without batch norm, after torchvision 0.14's vgg.py: 3x3
// convolutions and 2x2 max-poolings, pooling to 7x7, three Linear layers; convolutions drawn
// from kaiming_normal(fan_out), Linear weights from N(0, 0.01), every bias 0.
#include "layers/layer_util.hpp"
#include "layers/layers.hpp"
#include "zoo/cnn.hpp"
#include "zoo/families.hpp"

namespace dpx::zoo {

VggConfig vgg_config(int depth, bool batch_norm) {
  // torchvision's cfgs "A", "B", "D", "E"; 0 stands for "M".
  VggConfig c;
  c.batch_norm = batch_norm;
  switch (depth) {
    case 11: c.layers = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}; break;
    case 13: c.layers = {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}; break;
    case 16: c.layers = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0}; break;
    case 19:
      c.layers = {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0};
      break;
    default: usage_fail("vgg: no depth ", depth, " in torchvision (11, 13, 16 or 19)");
  }
  return c;
}

std::unique_ptr<nn::Module> build_vgg(const VggConfig& c, const ModelOptions& o) {
  if (c.hidden < 1) usage_fail("vgg: the classifier's hidden width must be positive");
  Rng rng(o.seed);
  auto features = std::make_unique<nn::Sequential>();
  int64_t channels = o.in_channels;
  bool any_conv = false;
  for (int v : c.layers) {
    if (v == 0) {
      features->emplace<nn::MaxPool2d>(2, 2);
      continue;
    }
    if (v < 0) usage_fail("vgg: channel counts must be positive (0 marks a max-pooling)");
    features->emplace<nn::Conv2d>(channels, v, 3, rng, 1, 1);
    if (c.batch_norm) features->emplace<nn::BatchNorm2d>(v);
    features->emplace<nn::ReLU>();
    channels = v;
    any_conv = true;
  }
  if (!any_conv) usage_fail("vgg: the configuration has no convolution");
  auto classifier = std::make_unique<nn::Sequential>();
  classifier->emplace<nn::Linear>(channels * 7 * 7, c.hidden, rng);
  classifier->emplace<nn::ReLU>();
  classifier->emplace<nn::Dropout>(c.dropout, rng);
  classifier->emplace<nn::Linear>(c.hidden, c.hidden, rng);
  classifier->emplace<nn::ReLU>();
  classifier->emplace<nn::Dropout>(c.dropout, rng);
  classifier->emplace<nn::Linear>(c.hidden, o.num_classes, rng);

  auto m = std::make_unique<nn::Sequential>();
  m->add("features", std::move(features));
  m->add("avgpool", std::make_unique<nn::AdaptiveAvgPool2d>(7, 7));
  m->add("flatten", std::make_unique<nn::Flatten>());  // torch.flatten(x, 1) in torchvision
  m->add("classifier", std::move(classifier));
  for (auto& [name, mod] : m->named_modules()) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(mod)) {
      nn::init_kaiming_normal_fan_out(conv->weight().value, rng);
      nn::init_constant(conv->bias()->value, 0.f);
    } else if (auto* fc = dynamic_cast<nn::Linear*>(mod)) {
      nn::init_normal(fc->weight().value, rng, 0.f, 0.01f);
      nn::init_constant(fc->bias()->value, 0.f);
    }
  }
  return m;
}

void add_vgg_models(std::vector<ModelInfo>& out) {
  const std::string note = "five 2x2 max-poolings of stride 2 need 32 pixels (the pooling to 7x7 is adaptive)";
  for (bool bn : {false, true})
    for (int depth : {11, 13, 16, 19})
      out.push_back({.name = "vgg" + std::to_string(depth) + (bn ? "_bn" : ""),
                     .family = "vgg",
                     .default_image_size = 224,
                     .default_in_channels = 3,
                     .min_image_size = 32,
                     .note = note,
                     .build = [depth, bn](const ModelOptions& o) { return build_vgg(vgg_config(depth, bn), o); },
                     .classifier = "classifier"});
}

}  // namespace dpx::zoo
