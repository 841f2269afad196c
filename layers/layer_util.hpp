// Helpers every layer shares: zeroed (or, for ops that write every element, uninitialised) gradient tensors made on the op's stream, where a
// parameter's gradient goes in backward, and initialisation that works whether a parameter is
// still on the host or already on a device (reset_parameters on a model in a CUDA buffer).
#pragma once
#include <cmath>
#include <string>

#include "core/rng.hpp"
#include "kernels/ops.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

// A zero f32 tensor on ctx.device, cleared by an op (on the op's stream for CUDA) so that
// backward ops, which accumulate, can write into it.
inline Tensor zeros_on(Context& ctx, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f32, ctx.device);
  if (t.numel() > 0) ops::fill(ctx, t, 0.f);
  return t;
}

// An uninitialised f32 tensor on ctx.device, for an op that writes every element
// (DxMode::overwrite): no fill kernel before it.
inline Tensor empty_on(Context& ctx, const Shape& shape) { return Tensor::empty(shape, DType::f32, ctx.device); }

// t itself where it is f32, else a new f32 tensor on ctx.device holding its values widened (a
// half-precision map for ops that take fp32).
inline Tensor as_f32(Context& ctx, const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor w = Tensor::empty(t.shape(), DType::f32, ctx.device);
  ops::cast(ctx, w, t, 1.f);
  return w;
}

// Module::backward_add's target: an f32 tensor of the input's shape, else an error naming the layer.
inline void check_add_target(const std::string& layer, const Tensor& into, const Shape& x_shape) {
  if (into.shape() != x_shape || into.dtype() != DType::f32)
    fail(layer, ": backward_add given ", dtype_name(into.dtype()), " ", shape_str(into.shape()),
         " to add dx into, expected f32 ", shape_str(x_shape));
}

// The tensor a backward op accumulates this parameter's gradient into, or nullptr when the
// parameter is frozen (the kernel then skips that gradient entirely). A module outside a
// Model has no flat gradient buffer, so its gradient is allocated (zeros) on first use,
// as PyTorch allocates .grad on the first backward.
inline Tensor* grad_target(Parameter& p) {
  if (!p.requires_grad) return nullptr;
  if (!p.grad.defined()) p.grad = Tensor::zeros(p.value.shape(), p.value.dtype(), p.value.device());
  return &p.grad;
}

// Frees what forward kept for backward (the module's clear_cache) when it goes out of scope at the
// end of a backward, as autograd frees a node's saved tensors once the node has run. Without it a
// layer's saved activations lived until its next forward, through the rest of the backward: at
// VGG-16's peak (batch 8, 224x224, in the first convolution's backward) 0.46 GB of every later
// layer's activations were still alive. Made after backward's checks, so that a backward refused
// for a wrong dy keeps what a corrected call needs. A second backward after one forward is refused
// ("backward called before forward"), as autograd refuses a second backward through freed buffers.
class FreeSaved {
 public:
  explicit FreeSaved(Module& m) : m_(m) {}
  ~FreeSaved() { m_.clear_cache(); }
  FreeSaved(const FreeSaved&) = delete;
  FreeSaved& operator=(const FreeSaved&) = delete;

 private:
  Module& m_;
};

// U(-bound, bound), drawn on the host so the numbers depend only on the Rng, never the device.
inline void init_uniform(Tensor& t, Rng& rng, float bound) {
  if (t.device().is_cpu()) {
    fill_uniform(t, rng, -bound, bound);
    return;
  }
  Tensor host = Tensor::empty(t.shape());
  fill_uniform(host, rng, -bound, bound);
  t.copy_from(host);
}

inline void init_constant(Tensor& t, float value) {
  Tensor host = t.device().is_cpu() ? t : Tensor::empty(t.shape(), t.dtype());
  if (host.dtype() == DType::i64) {
    for (int64_t i = 0; i < host.numel(); ++i) host.data<int64_t>()[i] = static_cast<int64_t>(value);
  } else {
    for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = value;
  }
  if (!t.device().is_cpu()) t.copy_from(host);
}

// PyTorch's default for Linear and Conv weights: kaiming_uniform_(a=sqrt(5)) has bound
// gain * sqrt(3 / fan_in) with gain = sqrt(2 / (1 + a^2)) = sqrt(1/3), i.e. 1/sqrt(fan_in);
// the bias uses the same bound (torch.nn.Linear.reset_parameters).
inline float default_init_bound(int64_t fan_in) {
  return fan_in > 0 ? 1.f / std::sqrt(static_cast<float>(fan_in)) : 0.f;
}

// Image maps as the channel ops (copy_channels, concat_channels) cut them, along dimension 1: a
// contiguous map (N, C, H, W) as it is, a channels-last one (N, H, W, C) as its rows (N*H*W, C).
inline Tensor channel_major(const Tensor& maps, bool channels_last) {
  return channels_last ? maps.view({-1, maps.size(3)}) : maps;
}
// The shape of maps like `x` (its layout: channels_last or not) with `channels` channels.
inline Shape maps_shape(const Shape& x, int64_t channels, bool channels_last) {
  Shape s = x;
  s[channels_last ? 3 : 1] = channels;
  return s;
}
// "(N, 64, H, W)", or "channels-last (N, H, W, 64)": what a layer expected, for its message.
inline std::string expected_maps(int64_t channels, bool channels_last) {
  return channels_last ? detail::concat("channels-last (N, H, W, ", channels, ")")
                       : detail::concat("(N, ", channels, ", H, W)");
}

// "True"/"False", as PyTorch prints booleans in a module's repr.
inline const char* py_bool(bool b) { return b ? "True" : "False"; }

}  // namespace dpx::nn
