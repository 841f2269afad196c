// The torch.nn.init initialisers that torchvision's model constructors apply after building a
// network (trunc_normal_, normal_, kaiming_normal_, kaiming_uniform_, xavier_uniform_), drawn on
// the host from a dpx::Rng, so the numbers depend only on the seed, never on a parameter's device.
#pragma once
#include <cmath>

#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace dpx::nn {

namespace init_detail {
// Runs `draw` on t, or on a host copy that is then written back when t lives on a device.
template <class Draw>
void init_on_host(Tensor& t, Draw draw) {
  if (t.device().is_cpu()) {
    draw(t);
    return;
  }
  Tensor host = Tensor::empty(t.shape());
  draw(host);
  t.copy_from(host);
}

// torch's _calculate_fan_in_and_fan_out: (out, in, k...) -> fan_in = in * prod(k),
// fan_out = out * prod(k). A depthwise weight (C, 1, k, k) has fan_out C k^2, not k^2.
inline int64_t receptive_field(const Tensor& w) {
  int64_t r = 1;
  for (int d = 2; d < w.dim(); ++d) r *= w.size(d);
  return r;
}
}  // namespace init_detail

inline int64_t fan_in(const Tensor& w) {
  return w.dim() >= 2 ? w.size(1) * init_detail::receptive_field(w) : w.numel();
}
inline int64_t fan_out(const Tensor& w) {
  return w.dim() >= 2 ? w.size(0) * init_detail::receptive_field(w) : w.numel();
}

inline void init_normal(Tensor& t, Rng& rng, float mean, float stddev) {
  init_detail::init_on_host(t, [&](Tensor& h) { fill_normal(h, rng, mean, stddev); });
}

// torch.nn.init.trunc_normal_(t, std=stddev): its default bounds a = -2, b = 2 are absolute
// values, not multiples of the standard deviation (so for std 0.02 nothing is ever cut).
inline void init_trunc_normal(Tensor& t, Rng& rng, float stddev, float lo = -2.f, float hi = 2.f) {
  init_detail::init_on_host(t, [&](Tensor& h) { fill_trunc_normal(h, rng, 0.f, stddev, lo, hi); });
}

// torch.nn.init.kaiming_normal_(w, mode="fan_out") with the default nonlinearity (leaky_relu,
// a = 0, gain sqrt 2): N(0, 2 / fan_out). EfficientNet's convolutions, ResNet's too.
inline void init_kaiming_normal_fan_out(Tensor& w, Rng& rng) {
  const int64_t f = fan_out(w);
  init_normal(w, rng, 0.f, f > 0 ? std::sqrt(2.f / static_cast<float>(f)) : 0.f);
}

// torch.nn.init.kaiming_normal_(w) with its defaults (mode fan_in, leaky_relu, a = 0): N(0, 2 /
// fan_in). DenseNet's convolutions.
inline void init_kaiming_normal_fan_in(Tensor& w, Rng& rng) {
  const int64_t f = fan_in(w);
  init_normal(w, rng, 0.f, f > 0 ? std::sqrt(2.f / static_cast<float>(f)) : 0.f);
}

// torch.nn.init.kaiming_uniform_(w) with its defaults (mode fan_in, leaky_relu, a = 0):
// U(-b, b), b = sqrt(6 / fan_in). SqueezeNet's convolutions.
inline void init_kaiming_uniform_fan_in(Tensor& w, Rng& rng) {
  const int64_t f = fan_in(w);
  const float bound = f > 0 ? std::sqrt(6.f / static_cast<float>(f)) : 0.f;
  init_detail::init_on_host(w, [&](Tensor& h) { fill_uniform(h, rng, -bound, bound); });
}

// torch.nn.init.xavier_uniform_(w): U(-b, b), b = sqrt(6 / (fan_in + fan_out)).
inline void init_xavier_uniform(Tensor& w, Rng& rng) {
  const float bound = std::sqrt(6.f / static_cast<float>(fan_in(w) + fan_out(w)));
  init_detail::init_on_host(w, [&](Tensor& h) { fill_uniform(h, rng, -bound, bound); });
}

}  // namespace dpx::nn
