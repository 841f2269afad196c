// The registry of every model dpx can build. Each family file adds its builders here.
#include "zoo/registry.hpp"

#include "core/error.hpp"
#include "zoo/families.hpp"
#include "zoo/heads.hpp"

namespace dpx::zoo {

const std::vector<ModelInfo>& registry() {
  static const std::vector<ModelInfo> models = [] {
    std::vector<ModelInfo> all;
    add_small_models(all);
    add_resnet_models(all);
    add_vgg_models(all);
    add_alexnet_models(all);
    add_densenet_models(all);
    add_squeezenet_models(all);
    add_swin_models(all);
    add_efficientnet_models(all);
    return all;
  }();
  return models;
}

std::string model_names() {
  std::string s;
  for (const auto& m : registry()) s += (s.empty() ? "" : ", ") + m.name;
  return s;
}

const ModelInfo& find_model(std::string_view name) {
  for (const auto& m : registry())
    if (m.name == name) return m;
  usage_fail("unknown model '", name, "': use one of ", model_names(), " (dpx models lists them)");
}

std::unique_ptr<nn::Module> build_model(std::string_view name, const ModelOptions& options) {
  const ModelInfo& info = find_model(name);
  if (options.num_classes < 1) usage_fail(name, ": the number of classes must be positive");
  if (options.in_channels < 1) usage_fail(name, ": the number of input channels must be positive");
  if (options.image_size < info.min_image_size)
    usage_fail(name, " needs an input of at least ", info.min_image_size, "x", info.min_image_size, " (got ",
               options.image_size, "x", options.image_size, ")", info.note.empty() ? "" : ": ", info.note,
               "; pass --image-size ", info.min_image_size, " or more");
  std::unique_ptr<nn::Module> model = info.build(options);
  apply_head(*model, info, options);
  return model;
}

}  // namespace dpx::zoo
