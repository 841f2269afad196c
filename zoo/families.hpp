// Internal to zoo/: each model family registers its builders.
#pragma once
#include <vector>

#include "zoo/registry.hpp"

namespace dpx::zoo {

void add_small_models(std::vector<ModelInfo>& out);  // mlp, lenet5
void add_swin_models(std::vector<ModelInfo>& out);          // swin_t, swin_s, swin_b
void add_efficientnet_models(std::vector<ModelInfo>& out);  // efficientnet_b0

}  // namespace dpx::zoo
