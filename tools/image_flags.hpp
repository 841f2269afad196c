// The flags of image-folder data sets, shared by dpx train, dpx bench and dpx data preview: the
// transforms under torchvision's names and defaults, DCT scaling, and the bad-file policy.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/data/image_dataset.hpp"

namespace dpx::tools {

// The text of the flags that take lists; empty: not given (torchvision's default stays, exactly).
struct ImageFlags {
  std::string crop_scale, crop_ratio, mean, std;
  std::string on_bad_image = "stop";
  bool no_dct_scaling = false;
};

// "A,B[,C]" -> numbers, `count` of them (0: any number, at least one); anything else is a usage
// error naming `flag` with `example`.
std::vector<double> numbers(const std::string& text, size_t count, const std::string& flag, const char* example);

// `with_bad_image_policy`: also --on-bad-image (what training does with a bad file).
void add_image_flags(CLI::App& cmd, data::ImageSetOptions& o, ImageFlags& f, bool with_bad_image_policy = true);
// Parses the list flags into `o` and checks every value (UsageError naming the flag).
void apply_image_flags(data::ImageSetOptions& o, const ImageFlags& f);

}  // namespace dpx::tools
