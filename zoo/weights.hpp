// A model's parameters and buffers to and from safetensors files by state_dict name, so
// weights saved from torchvision (model.state_dict()) run in dpx unchanged, and back.
#pragma once
#include <map>
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
// The same, except that names starting with `skip_prefix` ("fc.") take no part on either side:
// a new classifier (--head) keeps its fresh weights, and the file's old one is not reported.
LoadReport load_state(nn::Model& model, const SafeTensors& file, bool strict, const std::string& skip_prefix);

// "310 tensors loaded, 2 missing (fc.weight, fc.bias), 0 unexpected": what a non-strict load
// did, naming up to `limit` keys of each list.
std::string describe_load(const LoadReport& report, size_t limit = 20);

// Writes every parameter and buffer under its state_dict name (f32; num_batches_tracked i64),
// in the reference writer's order (sort_like_reference), atomically, with `metadata` plus
// "format": "pt" in the header, so safetensors.torch.load_file and load_state read it back.
void save_state(const std::string& path, nn::Model& model, std::map<std::string, std::string> metadata = {});

// Throws dpx::Error naming `flag`, the file and the first tensor that holds a NaN or an infinity
// (a weight like that poisons every output after it); `escape` says how to load it anyway, if at all.
void check_finite(nn::Model& model, const std::string& file, const char* flag, const std::string& escape = "");

}  // namespace dpx::zoo
