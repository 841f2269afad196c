// What a model costs, measured on one training-mode forward of one image on the host: its
// parameters, the floating-point operations of that forward, and the memory it leaves alive
// for backward. `dpx models` prints these for every registered model.
#pragma once
#include <cstdint>

#include "core/context.hpp"
#include "layers/module.hpp"
#include "zoo/registry.hpp"

namespace dpx::zoo {

struct ModelStats {
  int64_t parameters = 0;
  int64_t trainable = 0;         // parameters with requires_grad
  int64_t forward_flops = 0;     // per image: 2 per multiply-add of every Conv2d, Linear and
                                 // attention product q kᵀ, attn v (Module::last_forward_flops);
                                 // normalisation, activations, pooling, softmax, additions not counted
  int64_t activation_bytes = 0;  // per image: host bytes a training forward leaves alive (what
                                 // the layers keep for backward), measured with host_bytes_in_use
  int image_size = 0, in_channels = 0;
};

// Runs one training-mode forward of one zero image (1, in_channels, S, S) through `root` (on the
// host) on `ctx`, which must be a CPU context, and drops what it cached afterwards; the module
// is left in training mode. Batch norm sees one image: a model whose last maps are 1x1 at this
// size fails there, with batch norm's message.
ModelStats measure_module(nn::Module& root, int in_channels, int image_size, Context& ctx);
// Builds `info`'s model with `options` (build_model) and measures it at options' input.
ModelStats measure_model(const ModelInfo& info, const ModelOptions& options, Context& ctx);

}  // namespace dpx::zoo
