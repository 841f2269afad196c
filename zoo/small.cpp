// Small models for teaching, tests and quick studies on MNIST-sized data:
//   mlp    — Flatten, Linear(C·S·S → 256), ReLU, Linear(256 → 128), ReLU, Linear(128 → classes).
//   lenet5 — LeCun et al.'s LeNet-5 with today's habits: ReLU, max-pooling, batch norm after each
//            convolution, and both convolutions padded to keep their size (conv 6@5x5 pad 2, pool,
//            conv 16@5x5 pad 2, pool, fc 120, fc 84, fc classes); on 28x28 the first fc sees 16x7x7.
#include "layers/layers.hpp"
#include "zoo/families.hpp"

namespace dpx::zoo {

namespace {

std::unique_ptr<nn::Module> build_mlp(const ModelOptions& o) {
  Rng rng(o.seed);
  auto m = std::make_unique<nn::Sequential>();
  m->emplace<nn::Flatten>();
  m->emplace<nn::Linear>(int64_t{o.in_channels} * o.image_size * o.image_size, 256, rng);
  m->emplace<nn::ReLU>();
  m->emplace<nn::Linear>(256, 128, rng);
  m->emplace<nn::ReLU>();
  m->emplace<nn::Linear>(128, o.num_classes, rng);
  return m;
}

std::unique_ptr<nn::Module> build_lenet5(const ModelOptions& o) {
  Rng rng(o.seed);
  auto features = std::make_unique<nn::Sequential>();
  features->emplace<nn::Conv2d>(o.in_channels, 6, 5, rng, /*stride=*/1, /*padding=*/2);
  features->emplace<nn::BatchNorm2d>(6);
  features->emplace<nn::ReLU>();
  features->emplace<nn::MaxPool2d>(2);
  features->emplace<nn::Conv2d>(6, 16, 5, rng, 1, 2);
  features->emplace<nn::BatchNorm2d>(16);
  features->emplace<nn::ReLU>();
  features->emplace<nn::MaxPool2d>(2);
  int64_t side = o.image_size / 4;
  auto classifier = std::make_unique<nn::Sequential>();
  classifier->emplace<nn::Linear>(16 * side * side, 120, rng);
  classifier->emplace<nn::ReLU>();
  classifier->emplace<nn::Linear>(120, 84, rng);
  classifier->emplace<nn::ReLU>();
  classifier->emplace<nn::Linear>(84, o.num_classes, rng);
  auto m = std::make_unique<nn::Sequential>();
  m->add("features", std::move(features));
  m->add("flatten", std::make_unique<nn::Flatten>());
  m->add("classifier", std::move(classifier));
  return m;
}

}  // namespace

void add_small_models(std::vector<ModelInfo>& out) {
  out.push_back({.name = "mlp",
                 .family = "mlp",
                 .default_image_size = 28,
                 .default_in_channels = 1,
                 .min_image_size = 1,
                 .note = "",
                 .build = build_mlp,
                 .classifier = "5"});
  out.push_back({.name = "lenet5",
                 .family = "lenet",
                 .default_image_size = 28,
                 .default_in_channels = 1,
                 .min_image_size = 4,
                 .note = "two 2x2 poolings need 4 pixels",
                 .build = build_lenet5,
                 .classifier = "classifier"});
}

}  // namespace dpx::zoo
