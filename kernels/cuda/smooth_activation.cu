// Smooth activations on CUDA: sigmoid, SiLU (EfficientNet) and exact erf GELU (Swin's MLP),
// forward and accumulating backward, with the CPU op's formulas term for term.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;

constexpr float kInvSqrt2 = 0.70710678118654752f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi)

enum class Fn { sigmoid, silu, gelu };

template <Fn F>
__device__ inline float forward(float v) {
  if constexpr (F == Fn::sigmoid) return 1.f / (1.f + expf(-v));
  if constexpr (F == Fn::silu) return detail::silu_of(v);
  return 0.5f * v * (1.f + erff(v * kInvSqrt2));
}

// The derivative from what backward gets: sigmoid's output, SiLU's and GELU's input.
template <Fn F>
__device__ inline float derivative(float saved) {
  if constexpr (F == Fn::sigmoid) return saved * (1.f - saved);
  if constexpr (F == Fn::silu) return detail::silu_grad(saved);
  float cdf = 0.5f * (1.f + erff(saved * kInvSqrt2));
  float pdf = kInvSqrt2Pi * expf(-0.5f * saved * saved);
  return cdf + saved * pdf;
}

// The maps detail::map runs (four elements a thread where aligned, common.cuh).
template <Fn F>
struct Forward {
  __device__ float operator()(float v) const { return forward<F>(v); }
};
template <Fn F>
struct Backward {
  __device__ float operator()(float dy, float saved) const { return dy * derivative<F>(saved); }
};
template <Fn F>
struct BackwardAdd {
  __device__ float operator()(float dx, float dy, float saved) const { return dx + dy * derivative<F>(saved); }
};

template <Fn F>
void run_forward(Context& ctx, const char* op, Tensor& y, const Tensor& x) {
  CudaState& st = state_of(ctx);
  int64_t n = x.numel();
  float* py = f32(y, op, "y");
  const float* px = f32(x, op, "x");
  detail::map(st.stream, py, detail::MapInputs<1>{{px}}, n, Forward<F>{});
}

template <Fn F>
void run_backward(Context& ctx, const char* op, Tensor& dx, const Tensor& dy, const char* saved_name,
                  const Tensor& saved, DxMode dx_mode) {
  CudaState& st = state_of(ctx);
  int64_t n = dy.numel();
  float* pdx = f32(dx, op, "dx");
  const float* pdy = f32(dy, op, "dy");
  const float* ps = f32(saved, op, saved_name);
  if (dx_mode == DxMode::overwrite)
    detail::map(st.stream, pdx, detail::MapInputs<2>{{pdy, ps}}, n, Backward<F>{});
  else
    detail::map(st.stream, pdx, detail::MapInputs<3>{{pdx, pdy, ps}}, n, BackwardAdd<F>{});
}

}  // namespace

void sigmoid_forward(Context& ctx, Tensor& y, const Tensor& x) {
  run_forward<Fn::sigmoid>(ctx, "sigmoid_forward", y, x);
}
void sigmoid_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode dx_mode) {
  run_backward<Fn::sigmoid>(ctx, "sigmoid_backward", dx, dy, "y", y, dx_mode);
}
void silu_forward(Context& ctx, Tensor& y, const Tensor& x) { run_forward<Fn::silu>(ctx, "silu_forward", y, x); }
void silu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x, DxMode dx_mode) {
  run_backward<Fn::silu>(ctx, "silu_backward", dx, dy, "x", x, dx_mode);
}
void gelu_forward(Context& ctx, Tensor& y, const Tensor& x) { run_forward<Fn::gelu>(ctx, "gelu_forward", y, x); }
void gelu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x, DxMode dx_mode) {
  run_backward<Fn::gelu>(ctx, "gelu_backward", dx, dy, "x", x, dx_mode);
}

}  // namespace dpx::cuda
