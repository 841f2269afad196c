// Layout copies on CUDA and their backward: permute (up to 6 dimensions), roll over H and W, zero
// padding at the bottom and right of (A, H, W, B) maps, and Swin's window partition and merge.
// Every map is one-to-one, so each backward is a plain gather per gradient element: no atomics,
// deterministic.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/fast_divide.hpp"
#include "kernels/layout_plan.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;
using detail::kThreads;

constexpr int kMaxDims = ops::plan::kMaxPermuteDims;
using ops::plan::PermutePlan;
using ops::plan::permute_plan;

// A permutation's plan in the index type the kernel computes with: 32-bit unsigned for tensors of
// under 2^31 elements (every Swin and DenseNet tensor), where a division and a modulo per dimension
// cost a fraction of the 64-bit ones (a 64-bit division is a long emulated sequence on the GPU;
// Swin's permutes took 13 ms a step against PyTorch's 6 ms of copies on the H100, 2026-11-26),
// and there each size's FastDivide (kernels/cuda/fast_divide.hpp), a multiply-high for the
// hardware division (Swin's permutes still took 5.2 ms a step against PyTorch's 4.2 of copies on
// the H200, 2026-11-28).
template <typename I>
struct IndexPlan {
  int dims;
  I size[kMaxDims];
  I in_stride[kMaxDims];
  I numel;
  FastDivide div[kMaxDims];  // of size[k], 32-bit plans only
};

template <typename I>
IndexPlan<I> index_plan(const PermutePlan& p) {
  IndexPlan<I> q{};
  q.dims = p.dims;
  q.numel = static_cast<I>(p.numel);
  for (int k = 0; k < kMaxDims; ++k) {
    q.size[k] = static_cast<I>(p.size[k]);
    q.in_stride[k] = static_cast<I>(p.in_stride[k]);
    if (sizeof(I) == 4 && k < p.dims) q.div[k] = FastDivide(static_cast<uint32_t>(p.size[k]));
  }
  return q;
}

// Tensors this small take the 32-bit kernels: i plus the grid's stride then stays below 2^32.
constexpr int64_t kMax32 = (int64_t(1) << 31) - 1;

template <typename I>
__device__ inline I in_offset(const IndexPlan<I>& p, I i) {
  I off = 0;
#pragma unroll
  for (int k = kMaxDims - 1; k >= 0; --k) {
    if (k >= p.dims) continue;
    const I q = quotient(i, p.size[k], p.div[k]);
    off += (i - q * p.size[k]) * p.in_stride[k];
    i = q;
  }
  return off;
}

template <typename I>
__global__ void permute_kernel(float* out, const float* in, IndexPlan<I> p) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < p.numel; i += I(gridDim.x) * blockDim.x)
    out[i] = in[in_offset(p, i)];
}

// din[in_offset(i)] += dout[i] (or =): each din element is hit by exactly one i.
template <typename I, bool kOverwrite>
__global__ void permute_backward_kernel(float* din, const float* dout, IndexPlan<I> p) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < p.numel; i += I(gridDim.x) * blockDim.x) {
    if (kOverwrite) din[in_offset(p, i)] = dout[i];
    else din[in_offset(p, i)] += dout[i];
  }
}

struct Map {
  int64_t A, H, W, B;
};

Map map_of(const char* op, const char* name, const Tensor& t) {
  f32(t, op, name);
  return {t.size(0), t.size(1), t.size(2), t.size(3)};
}

int64_t wrap(int64_t shift, int64_t n) { return n > 0 ? ((shift % n) + n) % n : 0; }

// out[a, h, w, b] = in[a, (h - sh) mod H, (w - sw) mod W, b] with sh, sw in [0, H), [0, W).
// Backward is the same gather with the opposite shifts, accumulating.
template <bool kAccumulate>
__global__ void roll_kernel(float* out, const float* in, Map m, int64_t sh, int64_t sw) {
  DPX_CUDA_LOOP(i, m.A * m.H * m.W * m.B) {
    int64_t b = i % m.B, w = (i / m.B) % m.W, h = (i / (m.B * m.W)) % m.H, a = i / (m.B * m.W * m.H);
    int64_t hs = h - sh < 0 ? h - sh + m.H : h - sh, ws = w - sw < 0 ? w - sw + m.W : w - sw;
    float v = in[((a * m.H + hs) * m.W + ws) * m.B + b];
    if (kAccumulate) out[i] += v; else out[i] = v;
  }
}

// out (A, H2, W2, B) = in (A, H, W, B) padded with zeros; backward: din += dout's top-left block.
__global__ void pad_kernel(float* out, const float* in, Map to, Map from) {
  DPX_CUDA_LOOP(i, to.A * to.H * to.W * to.B) {
    int64_t b = i % to.B, w = (i / to.B) % to.W, h = (i / (to.B * to.W)) % to.H, a = i / (to.B * to.W * to.H);
    out[i] = h < from.H && w < from.W ? in[((a * from.H + h) * from.W + w) * from.B + b] : 0.f;
  }
}

__global__ void crop_add_kernel(float* din, const float* dout, Map small, Map big) {
  DPX_CUDA_LOOP(i, small.A * small.H * small.W * small.B) {
    int64_t b = i % small.B, w = (i / small.B) % small.W, h = (i / (small.B * small.W)) % small.H;
    int64_t a = i / (small.B * small.W * small.H);
    din[i] += dout[((a * big.H + h) * big.W + w) * big.B + b];
  }
}

// ---- Swin's windows: one gather for pad + roll + partition, one for its inverse -------------
// Channels are the innermost dimension and move together: U units of V (float4 where C % 4 == 0
// and both tensors are 16-byte aligned, as Swin's C = 96 .. 768 are).
template <typename I>
struct WindowGeom {
  I B, H, W, U, nH, nW, wh, ww, pH, pW, sh, sw;  // sh, sw in [0, pH), [0, pW)
  FastDivide dH, dW, dU, dnH, dnW, dwh, dww;    // of H, W, U, nH, nW, wh, ww: 32-bit geometries only
};

__device__ inline float zero_of(float) { return 0.f; }
__device__ inline float4 zero_of(float4) { return make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ inline float plus(float a, float b) { return a + b; }
__device__ inline float4 plus(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

// windows[b, i, j, u, v] = x[b, (i wh + u + sh) mod pH, (j ww + v + sw) mod pW], zero in the padding.
template <typename I, typename V>
__global__ void window_partition_kernel(V* windows, const V* x, WindowGeom<I> g) {
  const I n = g.B * g.nH * g.nW * g.wh * g.ww * g.U;
  for (I e = blockIdx.x * I(blockDim.x) + threadIdx.x; e < n; e += I(gridDim.x) * blockDim.x) {
    I t = e, q = quotient(t, g.U, g.dU);
    const I unit = t - q * g.U;
    t = q, q = quotient(t, g.ww, g.dww);
    const I v = t - q * g.ww;
    t = q, q = quotient(t, g.wh, g.dwh);
    const I u = t - q * g.wh;
    t = q, q = quotient(t, g.nW, g.dnW);
    const I j = t - q * g.nW;
    t = q, q = quotient(t, g.nH, g.dnH);
    const I i = t - q * g.nH, b = q;
    I hp = i * g.wh + u + g.sh, wp = j * g.ww + v + g.sw;
    if (hp >= g.pH) hp -= g.pH;
    if (wp >= g.pW) wp -= g.pW;
    windows[e] = hp < g.H && wp < g.W ? x[((b * g.H + hp) * g.W + wp) * g.U + unit] : zero_of(V{});
  }
}

// y[b, h, w] (=, or +=) windows at the rolled position (h - sh) mod pH, (w - sw) mod pW.
template <typename I, typename V, bool kOverwrite>
__global__ void window_merge_kernel(V* y, const V* windows, WindowGeom<I> g) {
  const I n = g.B * g.H * g.W * g.U;
  for (I e = blockIdx.x * I(blockDim.x) + threadIdx.x; e < n; e += I(gridDim.x) * blockDim.x) {
    I t = e, q = quotient(t, g.U, g.dU);
    const I unit = t - q * g.U;
    t = q, q = quotient(t, g.W, g.dW);
    const I w = t - q * g.W;
    t = q, q = quotient(t, g.H, g.dH);
    const I h = t - q * g.H, b = q;
    I hr = h + g.pH - g.sh, wr = w + g.pW - g.sw;
    if (hr >= g.pH) hr -= g.pH;
    if (wr >= g.pW) wr -= g.pW;
    const I hw = quotient(hr, g.wh, g.dwh), ww = quotient(wr, g.ww, g.dww);
    const V value = windows[((((b * g.nH + hw) * g.nW + ww) * g.wh + (hr - hw * g.wh)) * g.ww + (wr - ww * g.ww)) *
                                g.U + unit];
    if (kOverwrite) y[e] = value;
    else y[e] = plus(y[e], value);
  }
}

template <typename I>
WindowGeom<I> window_geom(const Tensor& x, const Tensor& windows, int64_t shift_h, int64_t shift_w, int64_t vec) {
  const int64_t nH = windows.size(1), nW = windows.size(2), wh = windows.size(3), ww = windows.size(4);
  WindowGeom<I> g{I(x.size(0)), I(x.size(1)), I(x.size(2)), I(x.size(3) / vec), I(nH), I(nW), I(wh), I(ww),
                  I(nH * wh), I(nW * ww), I(wrap(shift_h, nH * wh)), I(wrap(shift_w, nW * ww))};
  if constexpr (sizeof(I) == 4) {
    // The windows' sizes and U are at least 1 (the windows are not empty); the map's H or W may be
    // 0 under windows that cover more than it (all zeros then), where only the merge, which then
    // does not run, divides by them.
    g.dH = FastDivide(std::max<I>(g.H, 1)), g.dW = FastDivide(std::max<I>(g.W, 1)), g.dU = FastDivide(g.U);
    g.dnH = FastDivide(g.nH), g.dnW = FastDivide(g.nW), g.dwh = FastDivide(g.wh), g.dww = FastDivide(g.ww);
  }
  return g;
}

// Calls f(I{}, V{}) with the narrowest index type and the widest vector the tensors allow.
template <class F>
void window_dispatch(const Tensor& x, const Tensor& windows, F f) {
  const bool by4 = x.size(3) % 4 == 0 && detail::aligned16(x.raw()) && detail::aligned16(windows.raw());
  const bool small = windows.numel() <= kMax32 && x.numel() <= kMax32;
  if (small && by4) f(uint32_t{}, float4{});
  else if (small) f(uint32_t{}, float{});
  else if (by4) f(uint64_t{}, float4{});
  else f(uint64_t{}, float{});
}

}  // namespace

void window_partition(Context& ctx, Tensor& windows, const Tensor& x, int64_t shift_h, int64_t shift_w) {
  CudaState& st = state_of(ctx);
  const char* op = "window_partition";
  f32(x, op, "x");
  f32(windows, op, "windows");
  if (windows.numel() == 0) return;
  window_dispatch(x, windows, [&](auto index, auto vec) {
    using I = decltype(index);
    using V = decltype(vec);
    const int64_t width = sizeof(V) / sizeof(float);
    window_partition_kernel<I, V><<<detail::grid_for(windows.numel() / width), kThreads, 0, st.stream>>>(
        static_cast<V*>(windows.raw()), static_cast<const V*>(x.raw()),
        window_geom<I>(x, windows, shift_h, shift_w, width));
  });
  check_launch();
}

void window_merge(Context& ctx, Tensor& y, const Tensor& windows, int64_t shift_h, int64_t shift_w, DxMode mode) {
  CudaState& st = state_of(ctx);
  const char* op = "window_merge";
  f32(y, op, "y");
  f32(windows, op, "windows");
  if (y.numel() == 0) return;
  window_dispatch(y, windows, [&](auto index, auto vec) {
    using I = decltype(index);
    using V = decltype(vec);
    const int64_t width = sizeof(V) / sizeof(float);
    const unsigned grid = detail::grid_for(y.numel() / width);
    const WindowGeom<I> g = window_geom<I>(y, windows, shift_h, shift_w, width);
    V* py = static_cast<V*>(y.raw());
    const V* pw = static_cast<const V*>(windows.raw());
    if (mode == DxMode::overwrite) window_merge_kernel<I, V, true><<<grid, kThreads, 0, st.stream>>>(py, pw, g);
    else window_merge_kernel<I, V, false><<<grid, kThreads, 0, st.stream>>>(py, pw, g);
  });
  check_launch();
}

void permute(Context& ctx, Tensor& out, const Tensor& in, const std::vector<int>& perm) {
  CudaState& st = state_of(ctx);
  const char* op = "permute";
  const float* pin = f32(in, op, "in");
  float* pout = f32(out, op, "out");
  PermutePlan p = permute_plan(op, "in", in.shape(), "out", out.shape(), perm);
  if (p.numel == 0) return;
  if (p.numel <= kMax32)
    permute_kernel<<<detail::grid_for(p.numel), kThreads, 0, st.stream>>>(pout, pin, index_plan<uint32_t>(p));
  else
    permute_kernel<<<detail::grid_for(p.numel), kThreads, 0, st.stream>>>(pout, pin, index_plan<uint64_t>(p));
  check_launch();
}

void permute_backward(Context& ctx, Tensor& din, const Tensor& dout, const std::vector<int>& perm, DxMode dx_mode) {
  CudaState& st = state_of(ctx);
  const char* op = "permute_backward";
  float* pdin = f32(din, op, "din");
  const float* pdout = f32(dout, op, "dout");
  PermutePlan p = permute_plan(op, "din", din.shape(), "dout", dout.shape(), perm);
  if (p.numel == 0) return;
  const unsigned grid = detail::grid_for(p.numel);
  const bool small = p.numel <= kMax32, overwrite = dx_mode == DxMode::overwrite;
  if (small && overwrite)
    permute_backward_kernel<uint32_t, true><<<grid, kThreads, 0, st.stream>>>(pdin, pdout, index_plan<uint32_t>(p));
  else if (small)
    permute_backward_kernel<uint32_t, false><<<grid, kThreads, 0, st.stream>>>(pdin, pdout, index_plan<uint32_t>(p));
  else if (overwrite)
    permute_backward_kernel<uint64_t, true><<<grid, kThreads, 0, st.stream>>>(pdin, pdout, index_plan<uint64_t>(p));
  else
    permute_backward_kernel<uint64_t, false><<<grid, kThreads, 0, st.stream>>>(pdin, pdout, index_plan<uint64_t>(p));
  check_launch();
}

void roll(Context& ctx, Tensor& out, const Tensor& in, int64_t shift_h, int64_t shift_w) {
  CudaState& st = state_of(ctx);
  const char* op = "roll";
  Map m = map_of(op, "in", in);
  f32(out, op, "out");
  if (in.numel() == 0) return;
  roll_kernel<false><<<detail::grid_for(in.numel()), kThreads, 0, st.stream>>>(
      static_cast<float*>(out.raw()), static_cast<const float*>(in.raw()), m, wrap(shift_h, m.H), wrap(shift_w, m.W));
  check_launch();
}

void roll_backward(Context& ctx, Tensor& din, const Tensor& dout, int64_t shift_h, int64_t shift_w) {
  CudaState& st = state_of(ctx);
  const char* op = "roll_backward";
  Map m = map_of(op, "dout", dout);
  f32(din, op, "din");
  if (dout.numel() == 0) return;
  // din[h] += dout[h + sh]: a roll by -shift.
  roll_kernel<true><<<detail::grid_for(dout.numel()), kThreads, 0, st.stream>>>(
      static_cast<float*>(din.raw()), static_cast<const float*>(dout.raw()), m, wrap(-shift_h, m.H),
      wrap(-shift_w, m.W));
  check_launch();
}

void pad_hw(Context& ctx, Tensor& out, const Tensor& in) {
  CudaState& st = state_of(ctx);
  const char* op = "pad_hw";
  Map s = map_of(op, "in", in), t = map_of(op, "out", out);
  if (out.numel() == 0) return;
  pad_kernel<<<detail::grid_for(out.numel()), kThreads, 0, st.stream>>>(
      static_cast<float*>(out.raw()), static_cast<const float*>(in.raw()), t, s);
  check_launch();
}

void pad_hw_backward(Context& ctx, Tensor& din, const Tensor& dout) {
  CudaState& st = state_of(ctx);
  const char* op = "pad_hw_backward";
  Map s = map_of(op, "din", din), t = map_of(op, "dout", dout);
  if (din.numel() == 0) return;
  crop_add_kernel<<<detail::grid_for(din.numel()), kThreads, 0, st.stream>>>(
      static_cast<float*>(din.raw()), static_cast<const float*>(dout.raw()), s, t);
  check_launch();
}

}  // namespace dpx::cuda
