// Reference smooth activations, forward and backward: sigmoid, SiLU and exact (erf) GELU.
// Each element is computed in double and rounded once to f32.
#include <algorithm>
#include <cmath>

#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

namespace {
double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
// Phi(v), the standard normal CDF, and phi(v), its density.
double normal_cdf(double v) { return 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))); }
double normal_pdf(double v) { return std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI); }
}  // namespace

// y = 1 / (1 + e^-x)
void sigmoid_forward(Context&, Tensor& y, const Tensor& x) {
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) yp[i] = static_cast<float>(sigmoid(xp[i]));
}

// dsigmoid/dx = s (1 - s), with s the saved output.
void sigmoid_backward(Context&, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode dx_mode) {
  if (dx_mode == DxMode::overwrite) std::fill(dx.data<float>(), dx.data<float>() + dx.numel(), 0.f);
  float* dxp = dx.data<float>();
  const float* dyp = dy.data<float>();
  const float* yp = y.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double s = yp[i];
    dxp[i] += static_cast<float>(dyp[i] * s * (1.0 - s));
  }
}

// y = x * sigmoid(x), written x / (1 + e^-x)
void silu_forward(Context&, Tensor& y, const Tensor& x) {
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = xp[i];
    yp[i] = static_cast<float>(v / (1.0 + std::exp(-v)));
  }
}

// d/dx x s(x) = s + x s (1 - s) = s (1 + x (1 - s))
void silu_backward(Context&, Tensor& dx, const Tensor& dy, const Tensor& x, DxMode dx_mode) {
  if (dx_mode == DxMode::overwrite) std::fill(dx.data<float>(), dx.data<float>() + dx.numel(), 0.f);
  float* dxp = dx.data<float>();
  const float* dyp = dy.data<float>();
  const float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = xp[i], s = sigmoid(v);
    dxp[i] += static_cast<float>(dyp[i] * s * (1.0 + v * (1.0 - s)));
  }
}

// y = x Phi(x) = x/2 (1 + erf(x / sqrt 2))
void gelu_forward(Context&, Tensor& y, const Tensor& x) {
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) yp[i] = static_cast<float>(xp[i] * normal_cdf(xp[i]));
}

// d/dx x Phi(x) = Phi(x) + x phi(x)
void gelu_backward(Context&, Tensor& dx, const Tensor& dy, const Tensor& x, DxMode dx_mode) {
  if (dx_mode == DxMode::overwrite) std::fill(dx.data<float>(), dx.data<float>() + dx.numel(), 0.f);
  float* dxp = dx.data<float>();
  const float* dyp = dy.data<float>();
  const float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = xp[i];
    dxp[i] += static_cast<float>(dyp[i] * (normal_cdf(v) + v * normal_pdf(v)));
  }
}

}  // namespace dpx::ref
