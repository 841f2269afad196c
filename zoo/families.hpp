// Internal to zoo/: each model family registers its builders.
#pragma once
#include <vector>

#include "zoo/registry.hpp"

namespace dpx::zoo {

void add_small_models(std::vector<ModelInfo>& out);  // mlp, lenet5
void add_swin_models(std::vector<ModelInfo>& out);          // swin_t, swin_s, swin_b
void add_efficientnet_models(std::vector<ModelInfo>& out);  // efficientnet_b0
void add_resnet_models(std::vector<ModelInfo>& out);        // resnet18, 34, 50, 101, 152
void add_vgg_models(std::vector<ModelInfo>& out);           // vgg11..vgg19, with and without _bn
void add_alexnet_models(std::vector<ModelInfo>& out);       // alexnet
void add_densenet_models(std::vector<ModelInfo>& out);      // densenet121, 161, 169, 201
void add_squeezenet_models(std::vector<ModelInfo>& out);    // squeezenet1_0, squeezenet1_1

}  // namespace dpx::zoo
