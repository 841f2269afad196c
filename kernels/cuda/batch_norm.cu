// Batch normalisation on CUDA with dpx's own kernels rather than cuDNN's (deprecated in cuDNN 9):
// the ops.hpp contract (saved mean and 1/sqrt(var+eps), unbiased running variance, gradients
// that accumulate or are null, any eps) is then explicit. Statistics are summed in double, in a
// fixed order (per-chunk partials, then per channel), so results repeat bit for bit. Under
// --precision bf16|fp16 x (and dx) may be in that type, a convolution's output, and y (and a
// folded ReLU's relu_out) too, the input of a convolution, and dy, the gradient of the convolution
// after it (ops.def's half-precision maps): the kernels read x and dy through their element types
// X and G, widened on load, and round dx and y at their stores.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/fast_divide.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;
using detail::kThreads;
using detail::with_x_type;
using detail::x_data;
using detail::XF32;
using detail::XHalf;

// y (and dy) viewed as (N, C, S), x (and dx) as (N, Cx, S) with C <= Cx (the ops normalise x's
// first C channels): channel c's M = N*S elements are y[(n*C + c)*S + s] and x[(n*Cx + c)*S + s].
struct Layout {
  int64_t n, c, cx, s, m;
};

Layout layout_of(const Tensor& y, const Tensor& x) {
  Layout l{x.size(0), y.size(1), x.size(1), 1, 0};
  for (int d = 2; d < x.dim(); ++d) l.s *= x.size(d);
  l.m = l.n * l.s;
  return l;
}

// x's index of y's element i (of plane i / s): itself when x has y's channels. The elementwise
// kernels divide by c_count and s through Div: FastDivide (a multiply-high) with 32-bit indices,
// PlainDivide with 64-bit ones (kernels/cuda/fast_divide.hpp).
template <typename Index, typename Div>
__device__ inline Index x_index(Index i, const Div& c_count, Index cx, const Div& s) {
  if (cx == c_count.divisor) return i;
  const Index plane = s.div(i);
  return (c_count.div(plane) * cx + c_count.mod(plane)) * s.divisor + (i - plane * s.divisor);
}

// The forward's value before its epilogue: (x - mean) * invstd * gamma + beta, in this order in
// the training forward and in the backward that recomputes it (the same bits in both).
__device__ inline float bn_value(float x, float mean, float invstd, float gamma, float beta) {
  const float v = (x - mean) * invstd;
  return v * gamma + beta;
}

// v after the epilogue: max(v, 0) letting NaN through (relu_forward's rule), or silu_of(v).
__device__ inline float apply_epilogue(Epilogue epilogue, float v) {
  if (epilogue == Epilogue::relu) return detail::relu_of(v);
  if (epilogue == Epilogue::silu) return detail::silu_of(v);
  return v;
}

// dy as the gradient of the batch norm's own output, from the gradient of what follows it: dy
// itself; 0 where a folded ReLU's output is not > 0 (relu_out, relu_backward's rule); or
// dy * silu'(y) for a folded SiLU, y recomputed from x as the forward computed it (silu_beta).
struct DyThrough {
  const float* relu_out;   // null unless a ReLU's backward is folded in (an fp32 output)
  const float* silu_beta;  // null unless a SiLU's is
  const float* gamma;      // null: 1
  const float* mean;
  const float* invstd;
  const uint16_t* relu_half = nullptr;  // a folded ReLU's bf16/fp16 output (before a convolution)
  bool relu_bf16 = false;               // relu_half's type: bf16, else fp16
  template <typename Index>
  __device__ float operator()(float dy, Index at, float x, Index c) const {
    if (relu_out) return relu_out[at] > 0.f ? dy : 0.f;
    if (relu_half) return (relu_bf16 ? BF16::load(relu_half[at]) : F16::load(relu_half[at])) > 0.f ? dy : 0.f;
    if (silu_beta)
      return dy * detail::silu_grad(bn_value(x, mean[c], invstd[c], gamma ? gamma[c] : 1.f, silu_beta[c]));
    return dy;
  }
};

// Per (channel, chunk) partial sums. Forward: a = sum(x - shift), b = sum((x - shift)^2), with
// shift = the channel's first element so that the variance does not cancel catastrophically.
// Backward: a = sum(dy), b = sum(dy * (x - mean)), dy through the folded activation if any
// (DyThrough). grid = (C, chunks). G: dy's element type (XF32, or XHalf where dy is the
// convolution after it's bf16/fp16 dx, read widened: "half-precision maps" in ops.def).
template <bool kBackward, typename X, typename G = XF32>
__global__ void partial_sums_kernel(double* part_a, double* part_b, const typename X::T* x, const typename G::T* dy,
                                    DyThrough through, const float* mean, Layout l, int64_t chunk) {
  __shared__ double shared[33];
  int64_t c = blockIdx.x, p = blockIdx.y, chunks = gridDim.y;
  int64_t begin = p * chunk, end = min(l.m, begin + chunk);
  float center = kBackward ? mean[c] : X::load(x[c * l.s]);  // image 0's first element of the channel
  // Walk (n, s) incrementally: one division per thread instead of one per element.
  int64_t j = begin + threadIdx.x, step = blockDim.x;
  int64_t n = j / l.s, s = j % l.s, step_n = step / l.s, step_s = step % l.s;
  double a = 0.0, b = 0.0;
  for (; j < end; j += step) {
    int64_t at = (n * l.c + c) * l.s + s;
    const float xv = X::load(x[(n * l.cx + c) * l.s + s]);
    double d = static_cast<double>(xv) - center;
    if (kBackward) {
      double g = through(G::load(dy[at]), at, xv, c);
      a += g;
      b += g * d;
    } else {
      a += d;
      b += d * d;
    }
    n += step_n;
    s += step_s;
    if (s >= l.s) { s -= l.s; ++n; }
  }
  a = detail::block_sum(a, shared);
  b = detail::block_sum(b, shared);
  if (threadIdx.x == 0) {
    part_a[c * chunks + p] = a;
    part_b[c * chunks + p] = b;
  }
}

// The same partial sums where x is rows (M, Cx) and y (M, C) (s == 1): channels-last maps as rows
// (N*H*W, C) (--memory-format channels_last; a DenseNet layer's prefix of its block's rows) and
// BatchNorm1d. There a block per channel would read
// one float every C (a memory sector per element); here a block takes 32 neighbouring channels
// (threadIdx.x) over 8 row lanes (threadIdx.y), so a warp reads 32 consecutive floats, and the
// lanes' sums are added in lane order (a fixed order: the same bits every run). The shift is the
// channel's first element, as above. grid = (channel tiles of 32, chunks).
template <bool kBackward, typename X, typename G = XF32>
__global__ void row_partial_sums_kernel(double* part_a, double* part_b, const typename X::T* x,
                                        const typename G::T* dy, DyThrough through, const float* mean, Layout l,
                                        int64_t chunk) {
  __shared__ double lane_a[8][32], lane_b[8][32];
  const int64_t c = blockIdx.x * int64_t(32) + threadIdx.x;
  const int64_t p = blockIdx.y, chunks = gridDim.y;
  const int64_t begin = p * chunk, end = min(l.m, begin + chunk);
  double a = 0.0, b = 0.0;
  if (c < l.c) {
    const float center = kBackward ? mean[c] : X::load(x[c]);
    for (int64_t r = begin + threadIdx.y; r < end; r += 8) {
      const int64_t at = r * l.c + c;
      const float xv = X::load(x[r * l.cx + c]);
      const double d = static_cast<double>(xv) - center;
      if (kBackward) {
        const double g = through(G::load(dy[at]), at, xv, c);
        a += g;
        b += g * d;
      } else {
        a += d;
        b += d * d;
      }
    }
  }
  lane_a[threadIdx.y][threadIdx.x] = a;
  lane_b[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < l.c) {
    for (int k = 1; k < 8; ++k) {
      a += lane_a[k][threadIdx.x];
      b += lane_b[k][threadIdx.x];
    }
    part_a[c * chunks + p] = a;
    part_b[c * chunks + p] = b;
  }
}

template <typename X>
__global__ void finish_stats_kernel(float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                                    long long* batches_tracked, const double* part_a, const double* part_b,
                                    const typename X::T* x, Layout l, int chunks, float momentum, float eps) {
  int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c == 0 && batches_tracked) *batches_tracked += 1;  // the module's count, in this launch
  if (c >= l.c) return;
  double a = 0.0, b = 0.0;
  for (int p = 0; p < chunks; ++p) {
    a += part_a[c * chunks + p];
    b += part_b[c * chunks + p];
  }
  double m = static_cast<double>(l.m);
  double shifted_mean = a / m;
  double var = b / m - shifted_mean * shifted_mean;  // biased: what normalisation uses
  if (var < 0.0) var = 0.0;
  double mean = static_cast<double>(X::load(x[c * l.s])) + shifted_mean;
  save_mean[c] = static_cast<float>(mean);
  save_invstd[c] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  // PyTorch: running stats blend with the unbiased variance var * M / (M - 1).
  double mom = momentum;
  if (running_mean) running_mean[c] = static_cast<float>((1.0 - mom) * running_mean[c] + mom * mean);
  if (running_var) running_var[c] = static_cast<float>((1.0 - mom) * running_var[c] + mom * var * m / (m - 1.0));
}

// y = epilogue((x - mean) * invstd * gamma + beta), per channel; a missing gamma/beta means 1/0.
template <typename X, typename Y, typename Index, typename Div>
__global__ void normalize_kernel(typename Y::T* y, const typename X::T* x, const float* mean, const float* invstd,
                                 const float* gamma, const float* beta, Index total, Div c_count, Index cx, Div s,
                                 Epilogue epilogue) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < total; i += Index(gridDim.x) * blockDim.x) {
    Index c = c_count.mod(s.div(i));
    const float v = bn_value(X::load(x[x_index(i, c_count, cx, s)]), mean[c], invstd[c], gamma ? gamma[c] : 1.f,
                             beta ? beta[c] : 0.f);
    y[i] = Y::store(apply_epilogue(epilogue, v));
  }
}

// Eval: the same with running statistics; invstd as the training path computes it.
template <typename X, typename Y, typename Index, typename Div>
__global__ void normalize_eval_kernel(typename Y::T* y, const typename X::T* x, const float* running_mean,
                                      const float* running_var,
                                      const float* gamma, const float* beta, float eps, Index total, Div c_count,
                                      Index cx, Div s, Epilogue epilogue) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < total; i += Index(gridDim.x) * blockDim.x) {
    Index c = c_count.mod(s.div(i));
    float invstd = static_cast<float>(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
    const float v = bn_value(X::load(x[x_index(i, c_count, cx, s)]), running_mean[c], invstd, gamma ? gamma[c] : 1.f,
                             beta ? beta[c] : 0.f);
    y[i] = Y::store(apply_epilogue(epilogue, v));
  }
}

// Per channel: dbeta += sum(dy), dgamma += sum(dy * xhat), and the dx coefficients
// coef = (gamma * invstd, mean(dy), invstd^2 * sum(dy (x - mean)) / M).
__global__ void finish_backward_kernel(float* dgamma, float* dbeta, float* coef, const double* part_a,
                                       const double* part_b, const float* gamma, const float* invstd, Layout l,
                                       int chunks) {
  int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= l.c) return;
  double a = 0.0, b = 0.0;
  for (int p = 0; p < chunks; ++p) {
    a += part_a[c * chunks + p];
    b += part_b[c * chunks + p];
  }
  double is = invstd[c], m = static_cast<double>(l.m);
  if (dbeta) dbeta[c] += static_cast<float>(a);
  if (dgamma) dgamma[c] += static_cast<float>(b * is);
  if (coef) {
    coef[3 * c] = static_cast<float>((gamma ? gamma[c] : 1.0) * is);
    coef[3 * c + 1] = static_cast<float>(a / m);
    coef[3 * c + 2] = static_cast<float>(is * is * b / m);
  }
}

// dx (+)= gamma * invstd * (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy (x - mean))).
// dx has x's element type: rounded at the store where it is bf16/fp16.
template <typename X, typename G, typename Index, typename Div>
__global__ void backward_dx_kernel(typename X::T* dx, const typename G::T* dy, DyThrough through,
                                   const typename X::T* x, const float* mean, const float* coef, Index total,
                                   Div c_count, Index cx, Div s, bool overwrite) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < total; i += Index(gridDim.x) * blockDim.x) {
    Index c = c_count.mod(s.div(i)), xi = x_index(i, c_count, cx, s);
    const float xv = X::load(x[xi]);
    const float dyi = through(G::load(dy[i]), i, xv, c);
    const float g = coef[3 * c] * (dyi - coef[3 * c + 1] - (xv - mean[c]) * coef[3 * c + 2]);
    dx[xi] = X::store(overwrite ? g : X::load(dx[xi]) + g);
  }
}

// Chunks per channel: enough blocks to fill the GPU, each summing at least 16 elements per thread.
int chunks_for(const CudaState& st, const Layout& l) {
  int sms = 0;
  DPX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, st.device));
  int64_t want = (8 * int64_t(sms) + l.c - 1) / l.c;
  int64_t most = (l.m + 16 * kThreads - 1) / (16 * kThreads);
  return static_cast<int>(std::clamp<int64_t>(std::min(want, most), 1, 65535));
}

// Whether x is rows (M, Cx), summed by row_partial_sums_kernel.
bool as_rows(const Layout& l) { return l.s == 1; }

// Its chunks: about 8 blocks per multiprocessor over the channel tiles, each thread summing at
// least 16 rows.
int row_chunks_for(const CudaState& st, const Layout& l) {
  int sms = 0;
  DPX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, st.device));
  const int64_t tiles = (l.c + 31) / 32;
  const int64_t want = (8 * int64_t(sms) + tiles - 1) / tiles, most = (l.m + 16 * 8 - 1) / (16 * 8);
  return static_cast<int>(std::clamp<int64_t>(std::min(want, most), 1, 65535));
}

// The partial sums' launch: per channel, or per tile of 32 channels for rows.
template <bool kBackward, typename X, typename G = XF32>
void launch_partial_sums(const CudaState& st, double* pa, double* pb, const typename X::T* x,
                         const typename G::T* dy, const DyThrough& through, const float* mean, const Layout& l,
                         int chunks, int64_t chunk) {
  if (as_rows(l))
    row_partial_sums_kernel<kBackward, X, G><<<dim3(static_cast<unsigned>((l.c + 31) / 32), chunks), dim3(32, 8), 0,
                                            st.stream>>>(pa, pb, x, dy, through, mean, l, chunk);
  else
    partial_sums_kernel<kBackward, X, G><<<dim3(static_cast<unsigned>(l.c), chunks), kThreads, 0, st.stream>>>(
        pa, pb, x, dy, through, mean, l, chunk);
  check_launch();
}

// A per-channel tensor that may be absent (no affine parameters, no running statistics).
float* optional_f32(const Tensor& t, const char* op, const char* name, int64_t c) {
  if (!t.defined()) return nullptr;
  return f32(t, op, name);
}

// Launches an elementwise kernel over y's (N, C, S) with 32-bit indices where x's suffice too: the
// per-element channel lookup divides, and there by a multiply-high (FastDivide; a 32-bit hardware
// division is about twenty instructions, a 64-bit one several times more).
template <typename Launch>
void per_element(const Layout& l, Launch launch) {
  int64_t total = l.n * l.c * l.s;
  if (l.n * l.cx * l.s < (int64_t(1) << 31))
    launch(static_cast<uint32_t>(total), FastDivide(static_cast<uint32_t>(l.c)), static_cast<uint32_t>(l.cx),
           FastDivide(static_cast<uint32_t>(l.s)));
  else
    launch(static_cast<uint64_t>(total), PlainDivide(static_cast<uint64_t>(l.c)), static_cast<uint64_t>(l.cx),
           PlainDivide(static_cast<uint64_t>(l.s)));
}

}  // namespace

void batch_norm_forward_train(Context& ctx, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                              Tensor& running_mean, Tensor& running_var, const Tensor& x, const Tensor& gamma,
                              const Tensor& beta, float momentum, float eps, Tensor* batches_tracked,
                              Epilogue epilogue) {
  CudaState& st = state_of(ctx);
  const char* op = "batch_norm_forward_train";
  Layout l = layout_of(y, x);
  if (l.c == 0) {  // no statistics to finish: the count alone
    if (batches_tracked) increment_i64(ctx, *batches_tracked);
    return;
  }
  auto* counter = batches_tracked ? static_cast<long long*>(batches_tracked->raw()) : nullptr;
  const float* g = optional_f32(gamma, op, "gamma", l.c);
  const float* b = optional_f32(beta, op, "beta", l.c);
  float* rm = optional_f32(running_mean, op, "running_mean", l.c);
  float* rv = optional_f32(running_var, op, "running_var", l.c);
  float* pmean = f32(save_mean, op, "save_mean");
  float* pinv = f32(save_invstd, op, "save_invstd");
  int chunks = as_rows(l) ? row_chunks_for(st, l) : chunks_for(st, l);
  int64_t chunk = (l.m + chunks - 1) / chunks;
  detail::Scratch part(st, 2 * sizeof(double) * l.c * chunks);
  double* pa = part.as<double>();
  double* pb = pa + l.c * chunks;
  with_x_type(x.dtype(), [&](auto type) {
    using X = decltype(type);
    const typename X::T* px = x_data<X>(x, op, "x");
    launch_partial_sums<false, X>(st, pa, pb, px, nullptr, DyThrough{}, nullptr, l, chunks, chunk);
    finish_stats_kernel<X><<<static_cast<unsigned>((l.c + 127) / 128), 128, 0, st.stream>>>(
        pmean, pinv, rm, rv, counter, pa, pb, px, l, chunks, momentum, eps);
    check_launch();
    with_x_type(y.dtype(), [&](auto y_type) {
      using Y = decltype(y_type);
      typename Y::T* py = x_data<Y>(y, op, "y");
      per_element(l, [&](auto total, auto c, auto cx, auto s) {
        normalize_kernel<X, Y><<<detail::grid_for(static_cast<int64_t>(total)), kThreads, 0, st.stream>>>(
            py, px, pmean, pinv, g, b, total, c, cx, s, epilogue);
        check_launch();
      });
    });
  });
}

void batch_norm_forward_eval(Context& ctx, Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             const Tensor& running_mean, const Tensor& running_var, float eps,
                             Epilogue epilogue) {
  CudaState& st = state_of(ctx);
  const char* op = "batch_norm_forward_eval";
  Layout l = layout_of(y, x);
  if (y.numel() == 0) return;
  const float* g = optional_f32(gamma, op, "gamma", l.c);
  const float* b = optional_f32(beta, op, "beta", l.c);
  const float* rm = f32(running_mean, op, "running_mean");
  const float* rv = f32(running_var, op, "running_var");
  with_x_type(x.dtype(), [&](auto type) {
    using X = decltype(type);
    const typename X::T* px = x_data<X>(x, op, "x");
    with_x_type(y.dtype(), [&](auto y_type) {
      using Y = decltype(y_type);
      typename Y::T* py = x_data<Y>(y, op, "y");
      per_element(l, [&](auto total, auto c, auto cx, auto s) {
        normalize_eval_kernel<X, Y><<<detail::grid_for(static_cast<int64_t>(total)), kThreads, 0, st.stream>>>(
            py, px, rm, rv, g, b, eps, total, c, cx, s, epilogue);
        check_launch();
      });
    });
  });
}

void batch_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                         const Tensor& x, const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd,
                         DxMode dx_mode, const Tensor* relu_out, const Tensor* silu_beta) {
  CudaState& st = state_of(ctx);
  const char* op = "batch_norm_backward";
  Layout l = layout_of(dy, x);
  if ((!dx && !dgamma && !dbeta) || l.c == 0 || l.m == 0) return;
  const float* g = optional_f32(gamma, op, "gamma", l.c);
  const float* pmean = f32(save_mean, op, "save_mean");
  const float* pinv = f32(save_invstd, op, "save_invstd");
  const bool relu_half = relu_out && relu_out->dtype() != DType::f32;  // before a convolution
  const DyThrough through{relu_out && !relu_half ? f32(*relu_out, op, "relu_out") : nullptr,
                          silu_beta ? f32(*silu_beta, op, "silu_beta") : nullptr,
                          g,
                          pmean,
                          pinv,
                          relu_half ? static_cast<const uint16_t*>(relu_out->raw()) : nullptr,
                          relu_half && relu_out->dtype() == DType::bf16};
  int chunks = as_rows(l) ? row_chunks_for(st, l) : chunks_for(st, l);
  int64_t chunk = (l.m + chunks - 1) / chunks;
  detail::Scratch part(st, 2 * sizeof(double) * l.c * chunks + (dx ? 3 * sizeof(float) * l.c : 0));
  double* pa = part.as<double>();
  double* pb = pa + l.c * chunks;
  float* coef = dx ? reinterpret_cast<float*>(pb + l.c * chunks) : nullptr;
  // x and dy each f32 or the compute's half type (a convolution's output, and its gradient from the
  // convolution after the batch norm: ops.def).
  with_x_type(x.dtype(), [&](auto type) {
    with_x_type(dy.dtype(), [&](auto dy_type) {
      using X = decltype(type);
      using G = decltype(dy_type);
      const typename X::T* px = x_data<X>(x, op, "x");
      const typename G::T* pdy = x_data<G>(dy, op, "dy");
      launch_partial_sums<true, X, G>(st, pa, pb, px, pdy, through, pmean, l, chunks, chunk);
      finish_backward_kernel<<<static_cast<unsigned>((l.c + 127) / 128), 128, 0, st.stream>>>(
          dgamma ? f32(*dgamma, op, "dgamma") : nullptr, dbeta ? f32(*dbeta, op, "dbeta") : nullptr, coef, pa, pb,
          g, pinv, l, chunks);
      check_launch();
      if (!dx) return;
      typename X::T* pdx = x_data<X>(*dx, op, "dx");  // x's dtype (the op checks)
      per_element(l, [&](auto total, auto c, auto cx, auto s) {
        backward_dx_kernel<X, G><<<detail::grid_for(static_cast<int64_t>(total)), kThreads, 0, st.stream>>>(
            pdx, pdy, through, px, pmean, coef, total, c, cx, s, dx_mode == DxMode::overwrite);
        check_launch();
      });
    });
  });
}

}  // namespace dpx::cuda
