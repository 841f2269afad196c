// What `dpx infer` reads as images, and how it makes them the model's input: a safetensors tensor
// (float, taken as already normalised; or u8 pixels), an IDX images file (the MNIST format), or
// JPEG/PNG files. Pixels are made the model's input as dpx train made them: scaled to [0, 1] and
// normalised with the data set's mean and std (from the weights' metadata, dpx train --save writes
// them; ImageNet's for RGB weights without them), IDX images resized and replicated to RGB as the
// run's --image-size and --channels asked, image files resized and centre-cropped as torchvision's
// evaluation transform. Each choice is said in `InferInput::how`.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace dpx::tools {

enum class Normalize { automatic, yes, no };  // --normalize auto|yes|no

struct InferInputOptions {
  std::vector<std::string> paths;  // --input: one safetensors or IDX file, or image files
  std::string tensor_name;         // --tensor-name (safetensors)
  Normalize normalize = Normalize::automatic;
  std::vector<float> mean, std;    // --mean, --std (1 or the model's channels); empty: see above
  int in_channels = 3;             // the model's, as its weights were made
  int image_size = 0;              // the run's --image-size (the weights' metadata); 0: the input's own
  // The weights' metadata: the data set's mean and std as dpx train --save wrote them ("" if absent).
  std::string meta_mean, meta_std;
};

struct InferInput {
  std::string name;  // what it was ("images" of a.safetensors, t10k-images-idx3-ubyte, 3 image files)
  Tensor images;     // (N, in_channels, H, W) f32, the model's input
  std::string how;   // what was done to it, for the summary line
};

InferInput read_infer_input(const InferInputOptions& o);

// "a,b,c" -> floats, for --mean/--std and the metadata; throws UsageError naming `what`.
std::vector<float> parse_floats(const std::string& text, const std::string& what);

// Whether `path` begins as a safetensors file does: an 8-byte header length, then its JSON.
bool looks_like_safetensors(const std::string& path);

}  // namespace dpx::tools
