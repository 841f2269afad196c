// Helpers for the zoo suite: parameter counts, torchvision-style key fingerprints and a learnable
// synthetic batch (comparisons and inputs: tests/common/).
#pragma once
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "layers/model.hpp"
#include "layers/module.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"
#include "zoo/registry.hpp"

namespace dpx::testing {

inline int64_t count_parameters(nn::Module& m) {
  int64_t n = 0;
  for (auto& [name, p] : m.named_parameters()) n += p->value.numel();
  return n;
}

// FNV-1a (64-bit) of "name(d0,d1,...);" for every parameter and buffer, sorted by name: the same
// fingerprint Python computes over sorted(model.state_dict()) with the tensors' shapes. With a
// prefix, only the names that start with it ("features.").
inline uint64_t state_fingerprint(nn::Module& m, int64_t* count = nullptr, const std::string& prefix = "") {
  std::vector<std::pair<std::string, Shape>> entries;
  for (auto& [name, p] : m.named_parameters())
    if (name.starts_with(prefix)) entries.emplace_back(name, p->value.shape());
  for (auto& [name, t] : m.named_buffers())
    if (name.starts_with(prefix)) entries.emplace_back(name, t->shape());
  std::sort(entries.begin(), entries.end());
  if (count) *count = static_cast<int64_t>(entries.size());
  uint64_t h = 0xcbf29ce484222325ull;
  auto add = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  };
  for (auto& [name, shape] : entries) {
    std::string s = name + "(";
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i) s += ',';
      s += std::to_string(shape[i]);
    }
    add(s + ");");
  }
  return h;
}

// A batch whose two classes differ in mean brightness under noise: a model that learns at all
// lowers its loss on it within a few steps.
struct Batch {
  Tensor x, labels;
};
inline Batch two_class_batch(int64_t n, int64_t channels, int64_t size, uint64_t seed) {
  Batch b{Tensor::empty({n, channels, size, size}), Tensor::empty({n}, DType::i64)};
  Rng rng(seed);
  fill_normal(b.x, rng, 0.f, 0.5f);
  const int64_t per = channels * size * size;
  for (int64_t i = 0; i < n; ++i) {
    b.labels.data<int64_t>()[i] = i % 2;
    for (int64_t k = 0; k < per; ++k) b.x.data<float>()[i * per + k] += i % 2 ? 0.5f : -0.5f;
  }
  return b;
}

// The first model of each zoo family, and resnet50 for its bottleneck blocks, each with options
// for its smallest input (at least 16x16) and 3 classes. VGG is left out: its layers
// (convolution, ReLU, max and adaptive average pooling, dropout, linear, batch norm) are AlexNet's
// and ResNet's, and its 100 M-parameter classifier took 11 of a 17 s test. (Every model: 90 s.)
struct SmallModel {
  std::string name;
  zoo::ModelOptions options;
};
inline std::vector<SmallModel> one_model_per_family() {
  std::vector<SmallModel> out;
  std::set<std::string> families;
  for (const zoo::ModelInfo& info : zoo::registry()) {
    const bool first = families.insert(info.family).second;
    if ((!first && info.name != "resnet50") || info.family == "vgg") continue;
    zoo::ModelOptions o;
    o.num_classes = 3;
    o.in_channels = info.default_in_channels;
    o.image_size = std::max(info.min_image_size, 16);
    out.push_back({info.name, o});
  }
  return out;
}

}  // namespace dpx::testing
