// ResNet-18/34/50/101/152 after torchvision 0.14's resnet.py: a 7x7 stem, four stages of
// BasicBlock or Bottleneck blocks, global average pooling and one Linear; convolutions drawn
// from kaiming_normal(fan_out), batch norms 1 and 0, the Linear at PyTorch's default.
#include <vector>

#include "layers/layers.hpp"
#include "zoo/cnn.hpp"
#include "zoo/families.hpp"

namespace dpx::zoo {

namespace {
template <class Block>
std::unique_ptr<nn::Sequential> make_stage(int64_t& inplanes, int64_t planes, int blocks, int stride, Rng& rng) {
  auto stage = std::make_unique<nn::Sequential>();
  stage->emplace<Block>(inplanes, planes, stride, rng);
  inplanes = planes * Block::kExpansion;
  for (int i = 1; i < blocks; ++i) stage->emplace<Block>(inplanes, planes, 1, rng);
  return stage;
}
}  // namespace

ResNetConfig resnet_config(int depth) {
  switch (depth) {
    case 18: return {false, {2, 2, 2, 2}};
    case 34: return {false, {3, 4, 6, 3}};
    case 50: return {true, {3, 4, 6, 3}};
    case 101: return {true, {3, 4, 23, 3}};
    case 152: return {true, {3, 8, 36, 3}};
  }
  usage_fail("resnet: no depth ", depth, " in torchvision (18, 34, 50, 101 or 152)");
}

std::unique_ptr<nn::Module> build_resnet(const ResNetConfig& c, const ModelOptions& o) {
  if (c.base_planes < 1) usage_fail("resnet: base_planes must be positive (got ", c.base_planes, ")");
  for (int n : c.layers)
    if (n < 1) usage_fail("resnet: every stage needs at least one block");
  Rng rng(o.seed);
  int64_t inplanes = c.base_planes;
  auto m = std::make_unique<nn::Sequential>();
  m->add("conv1", std::make_unique<nn::Conv2d>(o.in_channels, inplanes, 7, rng, 2, 3, 1, 1, /*bias=*/false));
  m->add("bn1", std::make_unique<nn::BatchNorm2d>(inplanes));
  m->add("relu", std::make_unique<nn::ReLU>());
  m->add("maxpool", std::make_unique<nn::MaxPool2d>(3, 2, 1));
  for (int s = 0; s < 4; ++s) {
    const int64_t planes = c.base_planes << s;
    const int stride = s == 0 ? 1 : 2;
    m->add("layer" + std::to_string(s + 1),
           c.bottleneck ? make_stage<nn::Bottleneck>(inplanes, planes, c.layers[s], stride, rng)
                        : make_stage<nn::BasicBlock>(inplanes, planes, c.layers[s], stride, rng));
  }
  m->add("avgpool", std::make_unique<nn::AdaptiveAvgPool2d>(1, 1));
  m->add("flatten", std::make_unique<nn::Flatten>());  // torch.flatten(x, 1) in torchvision
  m->add("fc", std::make_unique<nn::Linear>(inplanes, o.num_classes, rng));
  // torchvision's pass over every module; batch norms are already 1 and 0, fc keeps its default.
  for (auto& [name, mod] : m->named_modules())
    if (auto* conv = dynamic_cast<nn::Conv2d*>(mod)) nn::init_kaiming_normal_fan_out(conv->weight().value, rng);
  // Every block's output but the last one's is read by the next block (half-precision maps under
  // --precision bf16|fp16: nn::ResNetBlock::set_output_read_by_block).
  std::vector<nn::Module*> blocks;  // in forward order
  for (auto& [name, mod] : m->named_modules())
    if (dynamic_cast<nn::BasicBlock*>(mod) || dynamic_cast<nn::Bottleneck*>(mod)) blocks.push_back(mod);
  for (size_t i = 0; i + 1 < blocks.size(); ++i) {
    if (auto* b = dynamic_cast<nn::BasicBlock*>(blocks[i])) b->set_output_read_by_block(true);
    if (auto* b = dynamic_cast<nn::Bottleneck*>(blocks[i])) b->set_output_read_by_block(true);
  }
  return m;
}

void add_resnet_models(std::vector<ModelInfo>& out) {
  const std::string note =
      "any size: every convolution is padded and the last pooling is adaptive; at 32 or less the last "
      "maps are 1x1, so training needs a batch of 2 or more for batch norm";
  for (int depth : {18, 34, 50, 101, 152})
    out.push_back({.name = "resnet" + std::to_string(depth),
                   .family = "resnet",
                   .default_image_size = 224,
                   .default_in_channels = 3,
                   .min_image_size = 1,
                   .note = note,
                   .build = [depth](const ModelOptions& o) { return build_resnet(resnet_config(depth), o); },
                   .classifier = "fc"});
}

}  // namespace dpx::zoo
