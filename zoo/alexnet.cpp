// AlexNet after torchvision 0.14's alexnet.py (the one-GPU variant of "One weird trick"): five
// convolutions, three max-poolings, pooling to 6x6 and three Linear layers, every layer at
// PyTorch's default initialisation (torchvision applies no pass of its own).
#include "layers/layers.hpp"
#include "zoo/cnn.hpp"
#include "zoo/families.hpp"

namespace dpx::zoo {

std::unique_ptr<nn::Module> build_alexnet(const AlexNetConfig& c, const ModelOptions& o) {
  if (c.width < 1 || c.hidden < 1) usage_fail("alexnet: width and hidden must be positive");
  Rng rng(o.seed);
  // 64, 192, 384, 256, 256 at width 64.
  const int64_t w1 = c.width, w2 = 3 * c.width, w3 = 6 * c.width, w4 = 4 * c.width;
  auto features = std::make_unique<nn::Sequential>();
  features->emplace<nn::Conv2d>(o.in_channels, w1, 11, rng, 4, 2);
  features->emplace<nn::ReLU>();
  features->emplace<nn::MaxPool2d>(3, 2);
  features->emplace<nn::Conv2d>(w1, w2, 5, rng, 1, 2);
  features->emplace<nn::ReLU>();
  features->emplace<nn::MaxPool2d>(3, 2);
  features->emplace<nn::Conv2d>(w2, w3, 3, rng, 1, 1);
  features->emplace<nn::ReLU>();
  features->emplace<nn::Conv2d>(w3, w4, 3, rng, 1, 1);
  features->emplace<nn::ReLU>();
  features->emplace<nn::Conv2d>(w4, w4, 3, rng, 1, 1);
  features->emplace<nn::ReLU>();
  features->emplace<nn::MaxPool2d>(3, 2);
  auto classifier = std::make_unique<nn::Sequential>();
  classifier->emplace<nn::Dropout>(c.dropout, rng);
  classifier->emplace<nn::Linear>(w4 * 6 * 6, c.hidden, rng);
  classifier->emplace<nn::ReLU>();
  classifier->emplace<nn::Dropout>(c.dropout, rng);
  classifier->emplace<nn::Linear>(c.hidden, c.hidden, rng);
  classifier->emplace<nn::ReLU>();
  classifier->emplace<nn::Linear>(c.hidden, o.num_classes, rng);

  auto m = std::make_unique<nn::Sequential>();
  m->add("features", std::move(features));
  m->add("avgpool", std::make_unique<nn::AdaptiveAvgPool2d>(6, 6));
  m->add("flatten", std::make_unique<nn::Flatten>());  // torch.flatten(x, 1) in torchvision
  m->add("classifier", std::move(classifier));
  return m;
}

void add_alexnet_models(std::vector<ModelInfo>& out) {
  out.push_back({.name = "alexnet",
                 .family = "alexnet",
                 .default_image_size = 224,
                 .default_in_channels = 3,
                 .min_image_size = 63,
                 .note = "the 11x11 stride-4 stem and three 3x3 stride-2 max-poolings need 63 pixels (the pooling "
                         "to 6x6 is adaptive)",
                 .build = [](const ModelOptions& o) { return build_alexnet(AlexNetConfig{}, o); },
                 .classifier = "classifier"});
}

}  // namespace dpx::zoo
