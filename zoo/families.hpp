// Internal to zoo/: each model family registers its builders.
#pragma once
#include <vector>

#include "zoo/registry.hpp"

namespace dpx::zoo {

void add_small_models(std::vector<ModelInfo>& out);  // mlp, lenet5

}  // namespace dpx::zoo
