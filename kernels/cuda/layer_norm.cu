// Layer normalisation over the last dimension on CUDA (torch.nn.LayerNorm): one warp per row,
// statistics in double with two passes as the CPU op. dgamma/dbeta are column sums over all rows:
// per-chunk partials then a fixed-order sum, so they repeat bit for bit.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;
using detail::kThreads;

__device__ inline double warp_total(double v) {
  return __shfl_sync(0xffffffffu, detail::warp_sum(v), 0);  // every lane gets lane 0's total
}

__global__ void forward_kernel(float* y, float* mean, float* rstd, const float* x, const float* gamma,
                               const float* beta, int64_t rows, int64_t D, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; r < rows; r += warps) {
    const float* in = x + r * D;
    double sum = 0.0;
    for (int64_t i = lane; i < D; i += 32) sum += in[i];
    const double mu = warp_total(sum) / static_cast<double>(D);
    double sq = 0.0;
    for (int64_t i = lane; i < D; i += 32) sq += (in[i] - mu) * (in[i] - mu);
    sq = warp_total(sq);
    const float m = static_cast<float>(mu);
    const float inv = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(D) + eps));
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = inv;
    }
    float* out = y + r * D;
    for (int64_t i = lane; i < D; i += 32) out[i] = (in[i] - m) * inv * gamma[i] + beta[i];
  }
}

// dx (one warp per row) (+)= rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
__global__ void backward_dx_kernel(float* dx, const float* dy, const float* x, const float* gamma,
                                   const float* mean, const float* rstd, int64_t rows, int64_t D, bool overwrite) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; r < rows; r += warps) {
    const float *in = x + r * D, *g = dy + r * D;
    const float m = mean[r], inv = rstd[r];
    double gsum = 0.0, gxsum = 0.0;
    for (int64_t i = lane; i < D; i += 32) {
      double gg = static_cast<double>(g[i]) * gamma[i];
      gsum += gg;
      gxsum += gg * ((in[i] - m) * inv);
    }
    const float a = static_cast<float>(warp_total(gsum) / static_cast<double>(D));
    const float b = static_cast<float>(warp_total(gxsum) / static_cast<double>(D));
    float* out = dx + r * D;
    for (int64_t i = lane; i < D; i += 32) {
      const float v = inv * (g[i] * gamma[i] - a - (in[i] - m) * inv * b);
      out[i] = overwrite ? v : out[i] + v;
    }
  }
}

// Partial column sums over one chunk of rows: a 32 x 8 block owns 32 columns; its 8 row lanes
// stride the chunk and are added in a fixed order. part_* is (chunks, D).
__global__ void param_partial_kernel(double* part_g, double* part_b, const float* dy, const float* x,
                                     const float* mean, const float* rstd, int64_t rows, int64_t D,
                                     int64_t chunk_rows) {
  __shared__ double sg[8][33], sb[8][33];
  const int64_t col = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_rows, r1 = min(rows, r0 + chunk_rows);
  double g_acc = 0.0, b_acc = 0.0;
  if (col < D)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      float g = dy[r * D + col];
      g_acc += static_cast<double>(g) * ((x[r * D + col] - mean[r]) * rstd[r]);
      b_acc += g;
    }
  sg[threadIdx.y][threadIdx.x] = g_acc;
  sb[threadIdx.y][threadIdx.x] = b_acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < D) {
    double tg = 0.0, tb = 0.0;
    for (int k = 0; k < 8; ++k) {
      tg += sg[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    part_g[chunk * D + col] = tg;
    part_b[chunk * D + col] = tb;
  }
}

__global__ void param_finish_kernel(float* dgamma, float* dbeta, const double* part_g, const double* part_b,
                                    int64_t chunks, int64_t D) {
  DPX_CUDA_LOOP(j, D) {
    double tg = 0.0, tb = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      tg += part_g[c * D + j];
      tb += part_b[c * D + j];
    }
    if (dgamma) dgamma[j] += static_cast<float>(tg);
    if (dbeta) dbeta[j] += static_cast<float>(tb);
  }
}

struct Rows {
  int64_t rows, D;
};

Rows check_ln(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd) {
  f32(x, op, "x");
  Rows s{x.numel() / x.size(-1), x.size(-1)};
  f32(gamma, op, "gamma");
  f32(mean, op, "mean");
  f32(rstd, op, "rstd");
  return s;
}

}  // namespace

void layer_norm_forward(Context& ctx, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& gamma,
                        const Tensor& beta, float eps) {
  CudaState& st = state_of(ctx);
  const char* op = "layer_norm_forward";
  Rows s = check_ln(op, x, gamma, mean, rstd);
  if (s.rows == 0) return;
  forward_kernel<<<detail::grid_for(s.rows * 32), kThreads, 0, st.stream>>>(
      f32(y, op, "y"), f32(mean, op, "mean"), f32(rstd, op, "rstd"), f32(x, op, "x"), f32(gamma, op, "gamma"),
      f32(beta, op, "beta"), s.rows, s.D, eps);
  check_launch();
}

void layer_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy, const Tensor& x,
                         const Tensor& gamma, const Tensor& mean, const Tensor& rstd, DxMode dx_mode) {
  CudaState& st = state_of(ctx);
  const char* op = "layer_norm_backward";
  Rows s = check_ln(op, x, gamma, mean, rstd);
  if (s.rows == 0) return;
  const float *px = f32(x, op, "x"), *pdy = f32(dy, op, "dy"), *pm = f32(mean, op, "mean"), *pr = f32(rstd, op, "rstd");
  if (dx) {
    backward_dx_kernel<<<detail::grid_for(s.rows * 32), kThreads, 0, st.stream>>>(
        f32(*dx, op, "dx"), pdy, px, f32(gamma, op, "gamma"), pm, pr, s.rows, s.D, dx_mode == DxMode::overwrite);
    check_launch();
  }
  if (!dgamma && !dbeta) return;
  // Enough blocks to fill the GPU, at least 32 rows per chunk.
  const int64_t col_blocks = (s.D + 31) / 32;
  const int64_t chunks = std::clamp<int64_t>(std::min<int64_t>(1024 / col_blocks, (s.rows + 31) / 32), 1, 65535);
  const int64_t chunk_rows = (s.rows + chunks - 1) / chunks;
  detail::Scratch part(st, 2 * sizeof(double) * chunks * s.D);
  double* pg = part.as<double>();
  double* pb = pg + chunks * s.D;
  param_partial_kernel<<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks)), dim3(32, 8), 0,
                         st.stream>>>(pg, pb, pdy, px, pm, pr, s.rows, s.D, chunk_rows);
  check_launch();
  param_finish_kernel<<<detail::grid_for(s.D), kThreads, 0, st.stream>>>(
      dgamma ? f32(*dgamma, op, "dgamma") : nullptr, dbeta ? f32(*dbeta, op, "dbeta") : nullptr, pg, pb, chunks, s.D);
  check_launch();
}

}  // namespace dpx::cuda
