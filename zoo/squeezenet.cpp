// SqueezeNet 1.0 and 1.1 after torchvision 0.14's squeezenet.py: a stem, Fire modules between
// ceil-mode max-poolings, and a 1x1 convolution to the classes pooled to 1x1; convolutions drawn
// from kaiming_uniform, the final one from N(0, 0.01), every bias 0.
#include "layers/layer_util.hpp"
#include "layers/layers.hpp"
#include "zoo/cnn.hpp"
#include "zoo/families.hpp"

namespace dpx::zoo {

std::unique_ptr<nn::Module> build_squeezenet(const std::string& version, const ModelOptions& o) {
  if (version != "1_0" && version != "1_1")
    usage_fail("squeezenet: unknown version '", version, "' (1_0 or 1_1)");
  Rng rng(o.seed);
  auto pool = [] { return std::make_unique<nn::MaxPool2d>(3, 2, 0, /*ceil_mode=*/true); };
  auto features = std::make_unique<nn::Sequential>();
  if (version == "1_0") {
    features->emplace<nn::Conv2d>(o.in_channels, 96, 7, rng, 2);
    features->emplace<nn::ReLU>();
    features->add(pool());
    features->emplace<nn::Fire>(96, 16, 64, 64, rng);
    features->emplace<nn::Fire>(128, 16, 64, 64, rng);
    features->emplace<nn::Fire>(128, 32, 128, 128, rng);
    features->add(pool());
    features->emplace<nn::Fire>(256, 32, 128, 128, rng);
    features->emplace<nn::Fire>(256, 48, 192, 192, rng);
    features->emplace<nn::Fire>(384, 48, 192, 192, rng);
    features->emplace<nn::Fire>(384, 64, 256, 256, rng);
    features->add(pool());
    features->emplace<nn::Fire>(512, 64, 256, 256, rng);
  } else {
    features->emplace<nn::Conv2d>(o.in_channels, 64, 3, rng, 2);
    features->emplace<nn::ReLU>();
    features->add(pool());
    features->emplace<nn::Fire>(64, 16, 64, 64, rng);
    features->emplace<nn::Fire>(128, 16, 64, 64, rng);
    features->add(pool());
    features->emplace<nn::Fire>(128, 32, 128, 128, rng);
    features->emplace<nn::Fire>(256, 32, 128, 128, rng);
    features->add(pool());
    features->emplace<nn::Fire>(256, 48, 192, 192, rng);
    features->emplace<nn::Fire>(384, 48, 192, 192, rng);
    features->emplace<nn::Fire>(384, 64, 256, 256, rng);
    features->emplace<nn::Fire>(512, 64, 256, 256, rng);
  }
  auto classifier = std::make_unique<nn::Sequential>();
  classifier->emplace<nn::Dropout>(0.5f, rng);
  auto& final_conv = classifier->emplace<nn::Conv2d>(512, o.num_classes, 1, rng);
  classifier->emplace<nn::ReLU>();
  classifier->emplace<nn::AdaptiveAvgPool2d>(1, 1);

  auto m = std::make_unique<nn::Sequential>();
  m->add("features", std::move(features));
  m->add("classifier", std::move(classifier));
  m->add("flatten", std::make_unique<nn::Flatten>());
  for (auto& [name, mod] : m->named_modules())
    if (auto* conv = dynamic_cast<nn::Conv2d*>(mod)) {
      if (conv == &final_conv)
        nn::init_normal(conv->weight().value, rng, 0.f, 0.01f);
      else
        nn::init_kaiming_uniform_fan_in(conv->weight().value, rng);
      nn::init_constant(conv->bias()->value, 0.f);
    }
  return m;
}

void add_squeezenet_models(std::vector<ModelInfo>& out) {
  out.push_back({.name = "squeezenet1_0",
                 .family = "squeezenet",
                 .default_image_size = 224,
                 .default_in_channels = 3,
                 .min_image_size = 21,
                 .note = "the 7x7 stride-2 stem and three 3x3 stride-2 max-poolings (ceil mode) need 21 pixels",
                 .build = [](const ModelOptions& o) { return build_squeezenet("1_0", o); },
                 .classifier = "classifier"});
  out.push_back({.name = "squeezenet1_1",
                 .family = "squeezenet",
                 .default_image_size = 224,
                 .default_in_channels = 3,
                 .min_image_size = 17,
                 .note = "the 3x3 stride-2 stem and three 3x3 stride-2 max-poolings (ceil mode) need 17 pixels",
                 .build = [](const ModelOptions& o) { return build_squeezenet("1_1", o); },
                 .classifier = "classifier"});
}

}  // namespace dpx::zoo
