// The convolutional families of torchvision 0.14 (ResNet, VGG, AlexNet, DenseNet, SqueezeNet):
// each builder's configuration, with torchvision's values as the defaults of the registered
// models, and a width knob so tests and studies can build the same architecture small.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "layers/module.hpp"
#include "zoo/registry.hpp"

namespace dpx::zoo {

// torchvision.models.ResNet: children conv1 (7x7 stride 2), bn1, relu, maxpool (3x3 stride 2),
// layer1..layer4 (blocks; stages 2-4 start with stride 2), avgpool (to 1x1), flatten, fc.
struct ResNetConfig {
  bool bottleneck = false;               // Bottleneck (resnet50+) or BasicBlock blocks
  std::array<int, 4> layers{2, 2, 2, 2};  // blocks per stage
  int64_t base_planes = 64;              // stage k has base_planes * 2^k planes (torchvision: 64)
};
ResNetConfig resnet_config(int depth);  // 18, 34, 50, 101 or 152
std::unique_ptr<nn::Module> build_resnet(const ResNetConfig& config, const ModelOptions& options);

// torchvision.models.VGG: children features (3x3 convolutions, batch norm when asked, ReLU,
// 2x2 max-pooling), avgpool (to 7x7), flatten, classifier (Linear to `hidden`, ReLU, Dropout,
// Linear, ReLU, Dropout, Linear to the classes).
struct VggConfig {
  std::vector<int> layers;  // output channels of each convolution; 0 is a max-pooling ("M")
  bool batch_norm = false;
  int64_t hidden = 4096;
  float dropout = 0.5f;
};
VggConfig vgg_config(int depth, bool batch_norm);  // 11, 13, 16 or 19
std::unique_ptr<nn::Module> build_vgg(const VggConfig& config, const ModelOptions& options);

// torchvision.models.AlexNet: features (five convolutions, three 3x3 stride-2 max-poolings),
// avgpool (to 6x6), flatten, classifier (Dropout, Linear, ReLU, Dropout, Linear, ReLU, Linear).
struct AlexNetConfig {
  int64_t width = 64;      // the first convolution's channels; the others scale with it (64:
                           // 64, 192, 384, 256, 256)
  int64_t hidden = 4096;
  float dropout = 0.5f;
};
std::unique_ptr<nn::Module> build_alexnet(const AlexNetConfig& config, const ModelOptions& options);

// torchvision.models.DenseNet: children features (conv0 7x7 stride 2, norm0, relu0, pool0,
// denseblock1, transition1, ..., denseblock4, norm5), relu, avgpool (to 1x1), flatten,
// classifier. Each transition halves the channels and the spatial size.
struct DenseNetConfig {
  int64_t growth = 32;
  std::vector<int> blocks{6, 12, 24, 16};  // dense layers per block
  int64_t init_features = 64;
  int64_t bn_size = 4;
  float drop_rate = 0.f;
};
DenseNetConfig densenet_config(int depth);  // 121, 161, 169 or 201
std::unique_ptr<nn::Module> build_densenet(const DenseNetConfig& config, const ModelOptions& options);

// torchvision.models.SqueezeNet: children features (stem, Fire modules, 3x3 stride-2 max-poolings
// in ceil mode), classifier (Dropout, final 1x1 convolution to the classes, ReLU, avgpool to
// 1x1), flatten. Version "1_0" (7x7 stem of 96) or "1_1" (3x3 stem of 64, earlier poolings).
std::unique_ptr<nn::Module> build_squeezenet(const std::string& version, const ModelOptions& options);

}  // namespace dpx::zoo
