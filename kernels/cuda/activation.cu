// ReLU and dropout on CUDA. ReLU runs four elements a thread where aligned (detail::map). Dropout
// draws element i's keep bit from Philox counter i of Rng(seed, stream) (kernels/cuda/philox.cuh),
// so the mask equals the CPU's bit for bit.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/philox.cuh"

namespace dpx::cuda {

namespace {

using detail::f32;
using detail::grid_for;
using detail::kThreads;

// ReLU and its gradient: detail::map's four-at-a-time loops (common.cuh).
struct Relu {
  __device__ float operator()(float v) const { return detail::relu_of(v); }
};
// The gradient passes where the output is positive (the output is what the layer keeps).
struct ReluGrad {
  __device__ float operator()(float dy, float y) const { return y > 0.f ? dy : 0.f; }
};
struct ReluGradAdd {
  __device__ float operator()(float dx, float dy, float y) const { return dx + ReluGrad{}(dy, y); }
};

// The same where the ReLU kept its output in bf16/fp16 (Y: detail::XHalf; the map a convolution
// reads next, ops.def's half-precision maps), read widened, where dy is in it (G: the dx of the
// convolution after), read widened, or where it writes dx in it (D: the dy of the convolution
// before, rounded at the store; written over, never added to).
template <typename Y, typename G, typename D>
__global__ void relu_grad_half_kernel(typename D::T* dx, const typename G::T* dy, const typename Y::T* y,
                                      int64_t n, bool add) {
  DPX_CUDA_LOOP(i, n) {
    const float g = ReluGrad{}(G::load(dy[i]), Y::load(y[i]));
    dx[i] = D::store(add ? D::load(dx[i]) + g : g);
  }
}

// `offset` (nullable): a CUDA graph's replay count on the device, added to the stream.
__device__ inline uint64_t offset_stream(uint64_t stream, const int64_t* offset) {
  return offset ? stream + static_cast<uint64_t>(*offset) : stream;
}

__global__ void dropout_forward_kernel(float* y, uint8_t* mask, const float* x, float p, float keep_scale,
                                       uint64_t seed, uint64_t stream, const int64_t* offset, int64_t n) {
  stream = offset_stream(stream, offset);
  DPX_CUDA_LOOP(i, n) {
    bool keep = philox_uniform(seed, stream, static_cast<uint64_t>(i)) >= p;
    mask[i] = keep ? 1 : 0;
    y[i] = keep ? x[i] * keep_scale : 0.f;
  }
}

__global__ void bernoulli_scale_kernel(float* out, float keep, float kept, uint64_t seed, uint64_t stream,
                                       const int64_t* offset, int64_t n) {
  stream = offset_stream(stream, offset);
  DPX_CUDA_LOOP(i, n) out[i] = philox_uniform(seed, stream, static_cast<uint64_t>(i)) < keep ? kept : 0.f;
}

__global__ void dropout_backward_kernel(float* dx, const float* dy, const uint8_t* mask, float keep_scale,
                                        int64_t n) {
  DPX_CUDA_LOOP(i, n) {
    if (mask[i]) dx[i] += dy[i] * keep_scale;
  }
}

// The device address of ctx.random_offset's value, or null.
const int64_t* random_offset(const Context& ctx) {
  return ctx.random_offset ? static_cast<const int64_t*>(ctx.random_offset->raw()) : nullptr;
}

}  // namespace

void relu_forward(Context& ctx, Tensor& y, const Tensor& x) {
  CudaState& st = state_of(ctx);
  int64_t n = x.numel();
  if (n == 0) return;
  detail::map(st.stream, f32(y, "relu_forward", "y"), detail::MapInputs<1>{{f32(x, "relu_forward", "x")}}, n, Relu{});
}

void relu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode dx_mode) {
  CudaState& st = state_of(ctx);
  int64_t n = dx.numel();
  if (n == 0) return;
  if (y.dtype() != DType::f32 || dx.dtype() != DType::f32 || dy.dtype() != DType::f32) {
    detail::with_x_type(y.dtype(), [&](auto y_type) {
      detail::with_x_type(dy.dtype(), [&](auto dy_type) {
        detail::with_x_type(dx.dtype(), [&](auto dx_type) {
          using Y = decltype(y_type);
          using G = decltype(dy_type);
          using D = decltype(dx_type);
          relu_grad_half_kernel<Y, G, D><<<grid_for(n), kThreads, 0, st.stream>>>(
              detail::x_data<D>(dx, "relu_backward", "dx"), detail::x_data<G>(dy, "relu_backward", "dy"),
              detail::x_data<Y>(y, "relu_backward", "y"), n, dx_mode == DxMode::add);
          check_launch();
        });
      });
    });
    return;
  }
  float* pdx = f32(dx, "relu_backward", "dx");
  const float *pdy = f32(dy, "relu_backward", "dy"), *py = f32(y, "relu_backward", "y");
  if (dx_mode == DxMode::overwrite)
    detail::map(st.stream, pdx, detail::MapInputs<2>{{pdy, py}}, n, ReluGrad{});
  else
    detail::map(st.stream, pdx, detail::MapInputs<3>{{pdx, pdy, py}}, n, ReluGradAdd{});
}

void dropout_forward(Context& ctx, Tensor& y, Tensor& mask, const Tensor& x, float p, uint64_t seed,
                     uint64_t stream) {
  CudaState& st = state_of(ctx);
  int64_t n = x.numel();
  if (n == 0) return;
  float keep_scale = p < 1.f ? 1.f / (1.f - p) : 0.f;  // p = 1 keeps nothing
  dropout_forward_kernel<<<grid_for(n), kThreads, 0, st.stream>>>(
      f32(y, "dropout_forward", "y"), static_cast<uint8_t*>(mask.raw()), f32(x, "dropout_forward", "x"),
      p, keep_scale, seed, stream, random_offset(ctx), n);
  check_launch();
}

void bernoulli_scale(Context& ctx, Tensor& out, float keep, uint64_t seed, uint64_t stream) {
  CudaState& st = state_of(ctx);
  const int64_t n = out.numel();
  if (n == 0) return;
  bernoulli_scale_kernel<<<grid_for(n), kThreads, 0, st.stream>>>(f32(out, "bernoulli_scale", "out"), keep,
                                                                  keep > 0.f ? 1.f / keep : 0.f, seed, stream,
                                                                  random_offset(ctx), n);
  check_launch();
}

void dropout_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& mask, float p) {
  CudaState& st = state_of(ctx);
  int64_t n = dy.numel();
  if (n == 0) return;
  float keep_scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  dropout_backward_kernel<<<grid_for(n), kThreads, 0, st.stream>>>(
      f32(dx, "dropout_backward", "dx"), f32(dy, "dropout_backward", "dy"),
      static_cast<const uint8_t*>(mask.raw()), keep_scale, n);
  check_launch();
}

}  // namespace dpx::cuda
