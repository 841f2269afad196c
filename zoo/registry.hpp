// The model registry: every model dpx can build, by name, with its defaults. `dpx models`
// prints it; `dpx train --model NAME` builds from it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.hpp"
#include "layers/module.hpp"

namespace dpx::zoo {

struct ModelOptions {
  int num_classes = 10;
  int in_channels = 3;
  int image_size = 224;   // square input, H = W
  uint64_t seed = 0;      // initialisation is drawn from Rng(seed)
  // Transfer learning (zoo/heads.hpp): "default" keeps the model's own classifier; "linear"
  // and "mlp4096" put a new one in its place.
  std::string head = "default";
  bool freeze_backbone = false;  // requires_grad off for every parameter outside the classifier
};

struct ModelInfo {
  std::string name;             // "resnet18"
  std::string family;           // "resnet"
  int default_image_size;       // the input it was designed for
  int default_in_channels;
  int min_image_size;           // smallest input the architecture accepts
  std::string note;             // why a minimum exists, or other caveats
  std::function<std::unique_ptr<nn::Module>(const ModelOptions&)> build;
  // The classifier's module path under the root ("fc", "classifier", "head"): what --head
  // replaces and what --freeze-backbone leaves trainable. Its parent must be a Sequential.
  std::string classifier;
};

const std::vector<ModelInfo>& registry();
// Throws dpx::UsageError listing the known names when `name` is not one of them.
const ModelInfo& find_model(std::string_view name);
// Builds and checks the options (image size within what the architecture accepts), then
// applies options.head and options.freeze_backbone.
std::unique_ptr<nn::Module> build_model(std::string_view name, const ModelOptions& options);
std::string model_names();  // "mlp, lenet5, ..." for help texts and errors

}  // namespace dpx::zoo
