// Broadcasting add and multiply on CUDA and their backward (sums over the broadcast dimensions).
// Shapes are merged on the host as the CPU op does (adjacent dimensions with the same broadcast
// pattern become one), so a squeeze-excitation scale is a two-dimensional problem. Backward sums
// each gradient element in double, in a fixed order, so results repeat bit for bit. Indices are
// 32-bit where the tensors allow (as PyTorch's canUse32BitIndexMath): a coordinate costs a 32-bit
// division per merged dimension instead of a 64-bit one (EfficientNet's squeeze-excitation
// products: 1.2 ms forward and 2.6 ms backward a step on the H100, 2026-11-27).
#include <initializer_list>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/fast_divide.hpp"
#include "kernels/layout_plan.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;
using detail::kThreads;

constexpr int kMaxDims = ops::plan::kMaxBroadcastDims;
using Layout = ops::plan::BroadcastLayout;


Layout make_layout(const Shape& out, std::initializer_list<const Shape*> operands) {
  return ops::plan::broadcast_layout(out, operands);
}

// Whether L is a (planes, plane) map in which operand `full` spans both dimensions and operand
// `one` holds one value per plane (a squeeze-excitation scale of an (N, C, H, W) map: (N, C, 1, 1);
// a per-image factor: (N, 1, 1, 1)): detail::per_plane's case, where no element needs a division.
bool one_per_plane(const Layout& L, int full, int one) {
  return L.dims == 2 && L.full[full][0] && L.full[full][1] && L.stride[full][1] == 1 && L.full[one][0] &&
         !L.full[one][1] && L.stride[one][0] == 1;
}

struct TimesPlane {
  __device__ float operator()(float, float x, float s) const { return x * s; }
};
struct PlusPlane {
  __device__ float operator()(float, float x, float s) const { return x + s; }
};
// da += dy * b as the reference and the general kernels add it, float(0.0 + double(dy) * b): the
// product rounded once (no fused multiply-add), +0 where a factor is zero (0.0 + -0.0), and -0
// where a product of non-zero factors underflows.
struct AddTimesPlane {
  __device__ float operator()(float old, float g, float s) const {
    const float product = __fmul_rn(g, s);
    return old + (product == 0.f && (g == 0.f || s == 0.f) ? 0.f : product);
  }
};

// A list of merged dimensions with the strides of dy (0) and of the other factor (1), compacted
// so that kernels index it with unrolled, compile-time positions; with each size's FastDivide
// (kernels/cuda/fast_divide.hpp) for the 32-bit kernels, set by with_dividers().
struct DimList {
  int count = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[2][kMaxDims] = {};
  int64_t numel = 1;
  FastDivide div[kMaxDims];
};

// `list` with its sizes' dividers (a size past 2^31 only ever meets the 64-bit kernels).
DimList with_dividers(DimList list) {
  for (int c = 0; c < list.count; ++c)
    if (list.size[c] <= (int64_t(1) << 31)) list.div[c] = FastDivide(static_cast<uint32_t>(list.size[c]));
  return list;
}

using detail::fits_int32;  // of the full tensor's elements: the broadcast operands are no larger

// Adds the strides of index i (row-major over `dims`) to off0 and off1. 32-bit indices divide by
// a multiply-high (a hardware division per dimension and element was the kernel's largest cost).
template <typename I>
__device__ inline void offsets(const DimList& dims, I i, I& off0, I& off1) {
#pragma unroll
  for (int c = kMaxDims - 1; c >= 0; --c) {
    if (c >= dims.count) continue;
    const I size = I(dims.size[c]), q = quotient(i, size, dims.div[c]), coord = i - q * size;
    i = q;
    off0 += coord * I(dims.stride[0][c]);
    off1 += coord * I(dims.stride[1][c]);
  }
}

template <typename I, bool kMul>
__global__ void binary_kernel(float* out, const float* a, const float* b, DimList dims) {
  // out is full and contiguous, so its offset is the index itself.
  DPX_CUDA_LOOP_AS(I, i, I(dims.numel)) {
    I oa = 0, ob = 0;
    offsets(dims, i, oa, ob);
    out[i] = kMul ? a[oa] * b[ob] : a[oa] + b[ob];
  }
}

// One thread per gradient element: used when the innermost dimension is kept, so neighbouring
// threads read neighbouring addresses while each loops over the reduced coordinates.
template <typename I>
__global__ void reduce_per_thread_kernel(float* dt, const float* dy, const float* other, DimList kept,
                                         DimList reduced) {
  DPX_CUDA_LOOP_AS(I, j, I(kept.numel)) {
    I base_dy = 0, base_other = 0;
    offsets(kept, j, base_dy, base_other);
    double sum = 0.0;
    for (I r = 0; r < I(reduced.numel); ++r) {
      I o_dy = base_dy, o_other = base_other;
      offsets(reduced, r, o_dy, o_other);
      sum += other ? static_cast<double>(dy[o_dy]) * other[o_other] : static_cast<double>(dy[o_dy]);
    }
    dt[j] += static_cast<float>(sum);
  }
}

// The same sum split over chunks of the reduced range, for few gradient elements with long sums:
// Swin's relative-position bias sums 4,096 windows into each of 7,203 elements, which one thread
// per element left to 7,203 threads (its backward took 6.8 ms a step on the H100, 2026-11-26).
// Each (element, chunk) sums its chunk in double into `partial`; reduce_chunks_finish_kernel then
// adds the chunks in order, so the result does not depend on the grid.
__global__ void reduce_chunk_kernel(double* partial, const float* dy, const float* other, DimList kept,
                                    DimList reduced, int64_t chunk_len) {
  const int64_t chunk = blockIdx.y, r0 = chunk * chunk_len, r1 = min(reduced.numel, r0 + chunk_len);
  DPX_CUDA_LOOP(j, kept.numel) {
    int64_t base_dy = 0, base_other = 0;
    offsets<int64_t>(kept, j, base_dy, base_other);
    double sum = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
      int64_t o_dy = base_dy, o_other = base_other;
      offsets(reduced, r, o_dy, o_other);
      sum += other ? static_cast<double>(dy[o_dy]) * other[o_other] : static_cast<double>(dy[o_dy]);
    }
    partial[chunk * kept.numel + j] = sum;
  }
}

__global__ void reduce_chunks_finish_kernel(float* dt, const double* partial, int64_t kept, int64_t chunks) {
  DPX_CUDA_LOOP(j, kept) {
    double sum = 0.0;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[c * kept + j];
    dt[j] += static_cast<float>(sum);
  }
}

// kGroup threads per gradient element (a warp, or the whole block for long sums): used when the
// innermost dimension is reduced, so a group's threads read neighbouring addresses.
template <typename I, int kGroup>
__global__ void reduce_per_group_kernel(float* dt, const float* dy, const float* other, DimList kept,
                                        DimList reduced) {
  const int lane = threadIdx.x % kGroup, groups_per_block = kThreads / kGroup;
  const I groups = I(gridDim.x) * I(groups_per_block), kept_n = I(kept.numel), reduced_n = I(reduced.numel);
  I first = I(blockIdx.x) * I(groups_per_block) + I(threadIdx.x / kGroup);
  // Every group runs the same number of rounds, so block-wide barriers are met by all threads.
  I rounds = (kept_n + groups - 1) / groups;
  for (I round = 0; round < rounds; ++round) {
    I j = first + round * groups;
    bool active = j < kept_n;
    double sum = 0.0;
    if (active) {
      I base_dy = 0, base_other = 0;
      offsets(kept, j, base_dy, base_other);
      for (I r = lane; r < reduced_n; r += kGroup) {
        I o_dy = base_dy, o_other = base_other;
        offsets(reduced, r, o_dy, o_other);
        sum += other ? static_cast<double>(dy[o_dy]) * other[o_other] : static_cast<double>(dy[o_dy]);
      }
    }
    if constexpr (kGroup == 32) {
      sum = detail::warp_sum(sum);
    } else {
      __shared__ double shared[33];
      sum = detail::block_sum(sum, shared);
    }
    if (active && lane == 0) dt[j] += static_cast<float>(sum);
  }
}

// dt += dy (times `other`) summed over the dimensions dt was broadcast along.
void reduce_to(CudaState& st, Tensor& dt, const Tensor& dy, const Tensor* other) {
  if (dy.numel() == 0 || dt.numel() == 0) return;  // an empty sum adds nothing
  const Shape& out = dy.shape();
  Layout L = other ? make_layout(out, {&out, &dt.shape(), &other->shape()}) : make_layout(out, {&out, &dt.shape()});
  // dt full and `other` one value per plane: a squeeze-excitation's input gradient, dy times the
  // plane's scale, which needs no sum.
  if (other && one_per_plane(L, 1, 2) &&
      detail::per_plane_f32<true>(st.stream, static_cast<float*>(dt.raw()), static_cast<const float*>(dy.raw()),
                                  static_cast<const float*>(other->raw()), L.size[0], L.size[1], L.size[0],
                                  AddTimesPlane{}))
    return;
  DimList kept, reduced;
  for (int d = 0; d < L.dims; ++d) {
    DimList& list = L.full[1][d] ? kept : reduced;
    list.size[list.count] = L.size[d];
    list.stride[0][list.count] = L.stride[0][d];
    list.stride[1][list.count] = other ? L.stride[2][d] : 0;
    list.numel *= L.size[d];
    ++list.count;
  }
  kept = with_dividers(kept);
  reduced = with_dividers(reduced);
  float* pdt = static_cast<float*>(dt.raw());
  const float* pdy = static_cast<const float*>(dy.raw());
  const float* po = other ? static_cast<const float*>(other->raw()) : nullptr;
  bool inner_kept = L.full[1][L.dims - 1];
  // Threads enough to fill a GPU (about 2^20 in flight): fewer gradient elements than that, with
  // sums long enough to split, take the chunked kernels.
  constexpr int64_t kFill = int64_t(1) << 20, kMinChunk = 32;
  const int64_t chunks = std::min<int64_t>({reduced.numel / kMinChunk, kFill / std::max<int64_t>(kept.numel, 1), 65535});
  if (inner_kept && chunks >= 2) {
    const int64_t chunk_len = (reduced.numel + chunks - 1) / chunks;
    const int64_t used = (reduced.numel + chunk_len - 1) / chunk_len;  // every chunk non-empty
    const detail::Scratch partial(st, static_cast<size_t>(used * kept.numel) * sizeof(double));
    const dim3 grid(detail::grid_for(kept.numel), static_cast<unsigned>(used));
    reduce_chunk_kernel<<<grid, kThreads, 0, st.stream>>>(partial.as<double>(), pdy, po, kept, reduced, chunk_len);
    check_launch();
    reduce_chunks_finish_kernel<<<detail::grid_for(kept.numel), kThreads, 0, st.stream>>>(
        pdt, partial.as<double>(), kept.numel, used);
  } else if (inner_kept || reduced.numel == 1) {
    const unsigned grid = detail::grid_for(kept.numel);
    if (fits_int32(dy.numel()))
      reduce_per_thread_kernel<int32_t><<<grid, kThreads, 0, st.stream>>>(pdt, pdy, po, kept, reduced);
    else
      reduce_per_thread_kernel<int64_t><<<grid, kThreads, 0, st.stream>>>(pdt, pdy, po, kept, reduced);
  } else if (reduced.numel < 4096) {
    const unsigned grid = detail::grid_for(kept.numel * 32);
    if (fits_int32(dy.numel()))
      reduce_per_group_kernel<int32_t, 32><<<grid, kThreads, 0, st.stream>>>(pdt, pdy, po, kept, reduced);
    else
      reduce_per_group_kernel<int64_t, 32><<<grid, kThreads, 0, st.stream>>>(pdt, pdy, po, kept, reduced);
  } else {
    const unsigned grid = detail::grid_for(kept.numel * kThreads);
    if (fits_int32(dy.numel()))
      reduce_per_group_kernel<int32_t, kThreads><<<grid, kThreads, 0, st.stream>>>(pdt, pdy, po, kept, reduced);
    else
      reduce_per_group_kernel<int64_t, kThreads><<<grid, kThreads, 0, st.stream>>>(pdt, pdy, po, kept, reduced);
  }
  check_launch();
}

template <bool kMul>
void broadcast_binary(Context& ctx, const char* op, Tensor& out, const Tensor& a, const Tensor& b) {
  CudaState& st = state_of(ctx);
  float* po = f32(out, op, "out");
  Layout L = make_layout(out.shape(), {&out.shape(), &a.shape(), &b.shape()});
  if (L.numel == 0) return;
  // One operand full, the other one value per plane (x * b or b * x: the same product).
  const auto by_plane = [&](const Tensor& full, const Tensor& one) {
    const auto with = [&](auto fn) {
      return detail::per_plane_f32<false>(st.stream, po, f32(full, op, "an operand"), f32(one, op, "an operand"),
                                          L.size[0], L.size[1], L.size[0], fn);
    };
    return kMul ? with(TimesPlane{}) : with(PlusPlane{});
  };
  if ((one_per_plane(L, 1, 2) && by_plane(a, b)) || (one_per_plane(L, 2, 1) && by_plane(b, a))) return;
  DimList dims;
  dims.count = L.dims;
  dims.numel = L.numel;
  for (int d = 0; d < L.dims; ++d) {
    dims.size[d] = L.size[d];
    dims.stride[0][d] = L.stride[1][d];
    dims.stride[1][d] = L.stride[2][d];
  }
  dims = with_dividers(dims);
  const float *pa = f32(a, op, "a"), *pb = f32(b, op, "b");
  if (fits_int32(L.numel))
    binary_kernel<int32_t, kMul><<<detail::grid_for(L.numel), kThreads, 0, st.stream>>>(po, pa, pb, dims);
  else
    binary_kernel<int64_t, kMul><<<detail::grid_for(L.numel), kThreads, 0, st.stream>>>(po, pa, pb, dims);
  check_launch();
}

}  // namespace

void add_broadcast(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  broadcast_binary<false>(ctx, "add_broadcast", out, a, b);
}

void mul_broadcast(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  broadcast_binary<true>(ctx, "mul_broadcast", out, a, b);
}

void add_broadcast_backward(Context& ctx, Tensor* da, Tensor* db, const Tensor& dy) {
  CudaState& st = state_of(ctx);
  const char* op = "add_broadcast_backward";
  f32(dy, op, "dy");
  if (da) reduce_to(st, *da, dy, nullptr);
  if (db) reduce_to(st, *db, dy, nullptr);
}

void mul_broadcast_backward(Context& ctx, Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                            const Tensor& b) {
  CudaState& st = state_of(ctx);
  const char* op = "mul_broadcast_backward";
  f32(dy, op, "dy");
  if (da) reduce_to(st, *da, dy, &b);
  if (db) reduce_to(st, *db, dy, &a);
}

}  // namespace dpx::cuda
