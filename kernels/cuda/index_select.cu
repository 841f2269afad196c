// Row gather on CUDA (torch.index_select(table, 0, index): Swin's relative position bias) and its
// scatter-add backward. The backward gathers instead of scattering: each table element scans the
// index in order and adds its rows, so repeats sum in the CPU's order, deterministically.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/determinism.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;

// An index outside [0, R) gives a NaN row: the CPU op throws, a kernel cannot, and NaN makes
// the mistake visible instead of reading another allocation.
__global__ void gather_kernel(float* out, const float* table, const int64_t* index, int64_t n, int64_t R, int64_t D) {
  DPX_CUDA_LOOP(i, n * D) {
    int64_t row = index[i / D];
    out[i] = row >= 0 && row < R ? table[row * D + i % D] : NAN;
  }
}

// One thread per table element (r, j): adds dout[i, j] for every i with index[i] == r, in
// index order. O(R * n) index reads, all broadcast across a warp: fine for position tables.
__global__ void gather_backward_kernel(float* dtable, const float* dout, const int64_t* index, int64_t n, int64_t R,
                                       int64_t D) {
  DPX_CUDA_LOOP(t, R * D) {
    int64_t r = t / D, j = t % D;
    float acc = dtable[t];
    for (int64_t i = 0; i < n; ++i)
      if (index[i] == r) acc += dout[i * D + j];
    dtable[t] = acc;
  }
}

// For large tables, where the scan would cost R * n: a scatter with atomics (sums of repeated
// rows then depend on timing in the last bit).
__global__ void scatter_add_kernel(float* dtable, const float* dout, const int64_t* index, int64_t n, int64_t R,
                                   int64_t D) {
  DPX_CUDA_LOOP(i, n * D) {
    int64_t row = index[i / D];
    if (row >= 0 && row < R) atomicAdd(dtable + row * D + i % D, dout[i]);
  }
}


}  // namespace

void index_select(Context& ctx, Tensor& out, const Tensor& table, const Tensor& index) {
  CudaState& st = state_of(ctx);
  const int64_t n = index.numel(), R = table.size(0), D = table.size(1);
  if (n * D == 0) return;
  gather_kernel<<<detail::grid_for(n * D), detail::kThreads, 0, st.stream>>>(
      static_cast<float*>(out.raw()), static_cast<const float*>(table.raw()), static_cast<const int64_t*>(index.raw()),
      n, R, D);
  check_launch();
}

void index_select_backward(Context& ctx, Tensor& dtable, const Tensor& dout, const Tensor& index) {
  CudaState& st = state_of(ctx);
  const int64_t n = index.numel(), R = dtable.size(0), D = dtable.size(1);
  if (n * D == 0 || R == 0) return;
  float* pt = static_cast<float*>(dtable.raw());
  const float* pd = static_cast<const float*>(dout.raw());
  const int64_t* pi = static_cast<const int64_t*>(index.raw());
  // Swin's largest table is (13^2 = 169, heads) against 49^2 = 2401 indices: 1.6e7 cheap reads,
  // below the rule's limit of 2^26; --deterministic scans whatever the size.
  if (kernels::index_select_backward_scans(R, D, n, ctx.deterministic)) {
    gather_backward_kernel<<<detail::grid_for(R * D), detail::kThreads, 0, st.stream>>>(pt, pd, pi, n, R, D);
  } else {
    scatter_add_kernel<<<detail::grid_for(n * D), detail::kThreads, 0, st.stream>>>(pt, pd, pi, n, R, D);
  }
  check_launch();
}

}  // namespace dpx::cuda
