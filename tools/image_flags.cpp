// The image-folder flags (see image_flags.hpp): torchvision's transform parameters as lists, each
// value checked and refused naming its flag.
#include "tools/image_flags.hpp"

#include <cstdlib>
#include <vector>

#include "core/error.hpp"

namespace dpx::tools {

std::vector<double> numbers(const std::string& text, size_t count, const std::string& flag, const char* example) {
  const std::string how = count ? detail::concat("give ", count, " comma-separated numbers") : "give comma-separated numbers";
  std::vector<double> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = text.find(',', begin);
    const std::string part = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    char* end = nullptr;
    const double v = std::strtod(part.c_str(), &end);
    if (part.empty() || end != part.c_str() + part.size()) usage_fail(flag, " '", excerpt(text), "': ", how, ", e.g. ", example);
    out.push_back(v);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  if (count && out.size() != count) usage_fail(flag, " '", excerpt(text), "': ", how, ", e.g. ", example);
  return out;
}

void add_image_flags(CLI::App& cmd, data::ImageSetOptions& o, ImageFlags& f, bool with_bad_image_policy) {
  cmd.add_option("--resize-size", o.transform.resize_size,
                 "image folders, evaluation: Resize(N) of the shorter side before CenterCrop(--image-size) (0: "
                 "image size x 256 / 224, torchvision's ImageNet recipe: 256 for 224)")
      ->capture_default_str();
  cmd.add_option("--crop-scale", f.crop_scale,
                 "image folders, training: RandomResizedCrop's scale MIN,MAX, the crop's share of the image's area "
                 "(default 0.08,1)");
  cmd.add_option("--crop-ratio", f.crop_ratio,
                 "image folders, training: RandomResizedCrop's ratio MIN,MAX of the crop's width to its height "
                 "(default 0.75,1.3333 = 3/4,4/3)");
  cmd.add_option("--flip", o.transform.flip_p,
                 "image folders, training: RandomHorizontalFlip's probability (0: no flip)")
      ->capture_default_str();
  cmd.add_option("--mean", f.mean, "image folders: Normalize's mean R,G,B (default ImageNet's 0.485,0.456,0.406)");
  cmd.add_option("--std", f.std, "image folders: Normalize's std R,G,B (default ImageNet's 0.229,0.224,0.225)");
  cmd.add_flag("--no-dct-scaling", f.no_dct_scaling,
               "image folders: decode every JPEG at full size (by default one whose region to resize is at least "
               "twice the output is decoded at 1/2, 1/4 or 1/8 in the DCT domain: faster, within 0.07 of "
               "torchvision's values instead of equal)");
  if (!with_bad_image_policy) return;
  cmd.add_option("--on-bad-image", f.on_bad_image,
                 "image folders: a file that cannot be read or decoded: stop (an error naming it) or skip (left out "
                 "of its batch, counted and reported)")
      ->capture_default_str();
}

void apply_image_flags(data::ImageSetOptions& o, const ImageFlags& f) {
  if (!f.crop_scale.empty()) {
    const auto v = numbers(f.crop_scale, 2, "--crop-scale", "0.08,1");
    o.transform.scale_min = v[0];
    o.transform.scale_max = v[1];
  }
  if (!f.crop_ratio.empty()) {
    const auto v = numbers(f.crop_ratio, 2, "--crop-ratio", "0.75,1.3333");
    o.transform.ratio_min = v[0];
    o.transform.ratio_max = v[1];
  }
  if (!f.mean.empty()) {
    const auto v = numbers(f.mean, 3, "--mean", "0.485,0.456,0.406");
    for (int c = 0; c < 3; ++c) o.transform.mean[static_cast<size_t>(c)] = static_cast<float>(v[static_cast<size_t>(c)]);
  }
  if (!f.std.empty()) {
    const auto v = numbers(f.std, 3, "--std", "0.229,0.224,0.225");
    for (int c = 0; c < 3; ++c) o.transform.std[static_cast<size_t>(c)] = static_cast<float>(v[static_cast<size_t>(c)]);
  }
  o.transform.dct_scaling = !f.no_dct_scaling;
  o.on_bad_image = data::parse_bad_image_policy(f.on_bad_image);
  // The size is checked where it is known (the data set's default when --image-size is 0).
  data::ImageTransformOptions t = o.transform;
  t.size = 1;
  if (t.resize_size > 0) t.size = t.resize_size;
  t.validate();
}

}  // namespace dpx::tools
