// Softmax over the last dimension on CUDA, with an optional additive bias broadcast over the
// leading dimensions (attention scores plus a position bias or window mask), and its backward.
// One warp per row (attention rows are short and many); row sums in double, as the CPU op.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;
using detail::kThreads;

__global__ void softmax_kernel(float* y, const float* x, const float* bias, int64_t rows, int64_t L,
                               int64_t bias_rows) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; r < rows; r += warps) {
    const float* in = x + r * L;
    const float* b = bias ? bias + (r % bias_rows) * L : nullptr;
    float* out = y + r * L;
    float mx = -INFINITY;
    for (int64_t i = lane; i < L; i += 32) {
      float v = b ? in[i] + b[i] : in[i];
      out[i] = v;
      mx = fmaxf(mx, v);
    }
    mx = __shfl_sync(0xffffffffu, detail::warp_max(mx), 0);
    // A row of -inf (everything masked) gives NaN, as in torch.
    double sum = 0.0;
    for (int64_t i = lane; i < L; i += 32) {
      float e = expf(out[i] - mx);
      out[i] = e;
      sum += e;
    }
    sum = __shfl_sync(0xffffffffu, detail::warp_sum(sum), 0);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = lane; i < L; i += 32) out[i] *= inv;
  }
}

// dx += y * (dy - sum(dy * y)) along each row.
__global__ void softmax_backward_kernel(float* dx, const float* dy, const float* y, int64_t rows, int64_t L,
                                        bool overwrite) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; r < rows; r += warps) {
    const float *g = dy + r * L, *p = y + r * L;
    double dot = 0.0;
    for (int64_t i = lane; i < L; i += 32) dot += static_cast<double>(g[i]) * p[i];
    const float d = static_cast<float>(__shfl_sync(0xffffffffu, detail::warp_sum(dot), 0));
    float* out = dx + r * L;
    for (int64_t i = lane; i < L; i += 32) {
      const float v = p[i] * (g[i] - d);
      out[i] = overwrite ? v : out[i] + v;
    }
  }
}

}  // namespace

void softmax_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor* bias) {
  CudaState& st = state_of(ctx);
  const char* op = "softmax_forward";
  f32(x, op, "x");
  const int64_t L = x.size(-1), rows = x.numel() / L;
  const float* pb = nullptr;
  int64_t bias_rows = 1;
  if (bias && bias->defined()) {
    const int bd = bias->dim();
    bool trailing = bd >= 1 && bd <= x.dim();
    for (int d = 1; trailing && d <= bd; ++d) trailing = bias->size(-d) == x.size(-d);
    pb = f32(*bias, op, "bias");
    bias_rows = bias->numel() / L;
  }
  if (rows == 0) return;
  softmax_kernel<<<detail::grid_for(rows * 32), kThreads, 0, st.stream>>>(f32(y, op, "y"), f32(x, op, "x"), pb, rows,
                                                                         L, bias_rows);
  check_launch();
}

void softmax_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode dx_mode) {
  CudaState& st = state_of(ctx);
  const char* op = "softmax_backward";
  f32(y, op, "y");
  const int64_t L = y.size(-1), rows = y.numel() / L;
  if (rows == 0) return;
  softmax_backward_kernel<<<detail::grid_for(rows * 32), kThreads, 0, st.stream>>>(
      f32(dx, op, "dx"), f32(dy, op, "dy"), f32(y, op, "y"), rows, L, dx_mode == DxMode::overwrite);
  check_launch();
}

}  // namespace dpx::cuda
