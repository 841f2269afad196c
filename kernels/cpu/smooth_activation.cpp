// CPU smooth activations, forward and backward: sigmoid, SiLU (x * sigmoid(x), EfficientNet)
// and exact GELU (x * Phi(x) with erf, torch.nn.GELU's default, Swin's MLP). Each element
// depends only on its own inputs, so splitting the range over threads changes nothing.
#include <cmath>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi)

inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// y[i] = f(x[i]) for a unary forward op after its checks.
template <class F>
void map_unary(const Context& ctx, const char* op, Tensor& y, const Tensor& x, F f) {
  require_f32(op, "y", y);
  require_f32(op, "x", x);
  require_same_numel(op, "y", y, "x", x);
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  const int64_t n = x.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) yp[i] = f(xp[i]);
}

// dx[i] += dy[i] * f'(saved[i]), where `saved` is the op's input or output.
template <class F>
void accumulate_grad(const Context& ctx, const char* op, Tensor& dx, const Tensor& dy, const char* saved_name,
                     const Tensor& saved, F derivative) {
  require_f32(op, "dx", dx);
  require_f32(op, "dy", dy);
  require_f32(op, saved_name, saved);
  require_same_numel(op, "dx", dx, "dy", dy);
  require_same_numel(op, "dy", dy, saved_name, saved);
  float* dxp = dx.data<float>();
  const float *dyp = dy.data<float>(), *sp = saved.data<float>();
  const int64_t n = dy.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) dxp[i] += dyp[i] * derivative(sp[i]);
}

}  // namespace

void sigmoid_forward(Context& ctx, Tensor& y, const Tensor& x) {
  map_unary(ctx, "sigmoid_forward", y, x, sigmoid);
}

void sigmoid_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y) {
  accumulate_grad(ctx, "sigmoid_backward", dx, dy, "y", y, [](float s) { return s * (1.f - s); });
}

void silu_forward(Context& ctx, Tensor& y, const Tensor& x) {
  // x / (1 + e^-x), as torch computes it: no 0 * inf for very negative x.
  map_unary(ctx, "silu_forward", y, x, [](float v) { return v / (1.f + std::exp(-v)); });
}

void silu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x) {
  accumulate_grad(ctx, "silu_backward", dx, dy, "x", x, [](float v) {
    const float s = sigmoid(v);
    return s * (1.f + v * (1.f - s));
  });
}

void gelu_forward(Context& ctx, Tensor& y, const Tensor& x) {
  map_unary(ctx, "gelu_forward", y, x, [](float v) { return 0.5f * v * (1.f + std::erf(v * kInvSqrt2)); });
}

void gelu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x) {
  // d/dx x Phi(x) = Phi(x) + x phi(x).
  accumulate_grad(ctx, "gelu_backward", dx, dy, "x", x, [](float v) {
    const float cdf = 0.5f * (1.f + std::erf(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
    return cdf + v * pdf;
  });
}

}  // namespace dpx::cpu
