// Layout copies on CUDA and their backward: permute (up to 6 dimensions), roll over H and W, and
// zero padding at the bottom and right of (A, H, W, B) maps. Every map is one-to-one, so each
// backward is a plain gather per gradient element: no atomics, deterministic.
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"
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
// Swin's permutes took 13 ms a step against PyTorch's 6 ms of copies on the H100, 2026-11-26).
template <typename I>
struct IndexPlan {
  int dims;
  I size[kMaxDims];
  I in_stride[kMaxDims];
  I numel;
};

template <typename I>
IndexPlan<I> index_plan(const PermutePlan& p) {
  IndexPlan<I> q{};
  q.dims = p.dims;
  q.numel = static_cast<I>(p.numel);
  for (int k = 0; k < kMaxDims; ++k) {
    q.size[k] = static_cast<I>(p.size[k]);
    q.in_stride[k] = static_cast<I>(p.in_stride[k]);
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
    off += (i % p.size[k]) * p.in_stride[k];
    i /= p.size[k];
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

}  // namespace

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
