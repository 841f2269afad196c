// Transfer learning on any registered model, as the measurement studies did it
// (docs/ARCHITECTURE.md, Studies): the model's classifier replaced by a new head, and the
// backbone (every parameter outside the classifier) frozen so that only the head trains,
// communicates and is updated.
#pragma once
#include <memory>
#include <string>

#include "core/rng.hpp"
#include "layers/module.hpp"
#include "layers/sequential.hpp"
#include "zoo/registry.hpp"

namespace dpx::zoo {

// Where a model's classifier sits (ModelInfo::classifier) and what it receives.
struct ClassifierSite {
  nn::Sequential* parent = nullptr;  // the Sequential holding it
  std::string name;                  // its child name there
  nn::Module* module = nullptr;
  int64_t in_features = 0;  // the first Linear's in_features, or the first Conv2d's in_channels
  bool spatial = false;     // it reads (N, C, H, W) maps (SqueezeNet's 1x1 convolution), not rows
};
// Throws naming the model when the path does not lead to a module under a Sequential or the
// classifier has neither a Linear nor a Conv2d.
ClassifierSite find_classifier(nn::Module& root, const ModelInfo& info);

// "linear": Linear(features -> classes). "mlp4096": the studies' classifier, Linear(features
// -> 4096), ReLU, Dropout(0.5), Linear(4096 -> 4096), ReLU, Dropout(0.5), Linear(4096 ->
// classes), children "0".."6" as an nn.Sequential of them would name them. For a spatial site
// the head starts with "pool" (AdaptiveAvgPool2d to 1x1) and "flatten". Layers keep PyTorch's
// default initialisation, as a freshly built torch head has.
std::unique_ptr<nn::Module> make_head(const std::string& head, int64_t in_features, bool spatial,
                                      int num_classes, Rng& rng);

// Applies options.head (from a stream of Rng(options.seed) of its own, so the backbone's
// numbers do not depend on the head) and options.freeze_backbone to a model `info` built.
// Throws dpx::UsageError for an unknown head or a model without a declared classifier.
void apply_head(nn::Module& root, const ModelInfo& info, const ModelOptions& options);

// "default, linear, mlp4096": for help texts.
std::string head_names();

}  // namespace dpx::zoo
