// Loading a model's parameters and buffers from safetensors tensors by state_dict name, so
// weights saved from torchvision (model.state_dict()) run in dpx unchanged.
#pragma once
#include <string>
#include <vector>

#include "core/safetensors.hpp"
#include "layers/model.hpp"

namespace dpx::zoo {

struct LoadReport {
  int64_t loaded = 0;                   // tensors copied into the model
  std::vector<std::string> missing;     // model names the file lacks (kept as they were)
  std::vector<std::string> unexpected;  // file names the model lacks (ignored)
};

// Copies every tensor of `file` whose name is a key of model.state_dict() into the model (onto
// the model's device). Shapes must match exactly; a floating-point file tensor (f16, bf16, f64)
// is converted to the model's f32, integers must match. strict (as torch's load_state_dict):
// throws naming the first few missing and unexpected keys instead of returning them.
LoadReport load_state(nn::Model& model, const SafeTensors& file, bool strict);

}  // namespace dpx::zoo
