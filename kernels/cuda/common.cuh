// Shared pieces of the CUDA kernels: launch sizes, argument checks, stream-ordered scratch
// buffers, half-precision operands and deterministic block reductions (fixed order, so results repeat bit for bit).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/cuda/check.hpp"
#include "core/cuda/context.hpp"
#include "core/cuda/half.cuh"
#include "core/cuda/memory.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"
#include "kernels/cuda/scratch.hpp"  // Scratch

// A grid-stride loop over [0, n) with a 64-bit index.
#define DPX_CUDA_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)
// The same with index type I (int32_t where detail::fits_int32 allows).
#define DPX_CUDA_LOOP_AS(I, i, n) \
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < (n); i += I(gridDim.x) * I(blockDim.x))

namespace dpx::cuda::detail {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items: enough to fill the GPU, capped so that index
// arithmetic stays cheap; the loops cover whatever the grid does not.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t(1) << 16));
}

// Whether indices below n may be 32-bit (as PyTorch's canUse32BitIndexMath), with room for a
// grid-stride loop's last step past the end (grid_for's grids have at most 2^24 threads).
inline bool fits_int32(int64_t n) { return n < int64_t(INT_MAX) - (int64_t(1) << 25); }
// Whether p allows float4 (16-byte) accesses.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- rows of a (rows, cols) matrix -------------------------------------------------------------
// Blocks of 32 columns (threadIdx.x: a warp touches 32 neighbouring floats of a row) by 8 row lanes
// (threadIdx.y), each block row striding down the rows; row_tile_grid gives about
// `rows_per_thread` rows to each thread (at most 65535 block rows).
const dim3 kRowTile(32, 8);
inline dim3 row_tile_grid(int64_t rows, int64_t cols, int64_t rows_per_thread) {
  const int64_t block_rows = (rows + 8 * rows_per_thread - 1) / (8 * rows_per_thread);
  return dim3(static_cast<unsigned>((cols + 31) / 32),
              static_cast<unsigned>(std::clamp<int64_t>(block_rows, 1, 65535)));
}

// y[r, col] = b[col] (kAdd: +=) for every row r, on kRowTile blocks: a per-column value broadcast
// down the rows (Linear's bias before its GEMM, a convolution's bias on channels-last maps) with
// no division per element.
template <bool kAdd>
__global__ void broadcast_rows_kernel(float* y, const float* b, int64_t rows, int64_t cols) {
  const int64_t col = blockIdx.x * int64_t(32) + threadIdx.x;
  if (col >= cols) return;
  const float v = b[col];
  for (int64_t r = blockIdx.y * int64_t(8) + threadIdx.y; r < rows; r += int64_t(gridDim.y) * 8) {
    if (kAdd) y[r * cols + col] += v;
    else y[r * cols + col] = v;
  }
}

// ---- one value per plane of a (planes, plane) map ----------------------------------------------
// out[p, j] = f(out[p, j], in(p * plane + j), v[p % period]) for every plane p and j < plane (in
// elements of V: float, or float4 where the plane is whole float4s and the pointers allow): a
// convolution's bias per (image, channel) plane (period = channels), a squeeze-excitation scale
// and its input gradient (period = planes), global average pooling's backward. A block row per
// plane (blockIdx.y, striding), its threads over the plane, kPlanePerThread values a thread a
// block's width apart, all loaded before any is stored; no division per element (the 64-bit one
// cost a pass's worth again). `in` is a functor: Floats (an fp32 tensor, possibly out itself),
// NoInput, or a widening of halves (kernels/cuda/conv2d.cu); f a functor on floats, applied to
// each of a float4's values; with kReadsOut false f gets 0 for the old value. Worth it where a
// plane holds at least a block's worth of V (kThreads): one of 7 x 7 floats leaves most of the
// block idle, and callers take their flat kernels there.
constexpr int kPlanePerThread = 4;

template <typename V>
struct Floats {
  const V* p;
  __device__ V operator()(int64_t i) const { return p[i]; }
};
template <typename V>
struct NoInput {
  __device__ V operator()(int64_t) const { return V{}; }
};

template <typename F>
__device__ inline float apply_each(const F& f, float old, float x, float s) {
  return f(old, x, s);
}
template <typename F>
__device__ inline float4 apply_each(const F& f, float4 old, float4 x, float s) {
  return make_float4(f(old.x, x.x, s), f(old.y, x.y, s), f(old.z, x.z, s), f(old.w, x.w, s));
}

template <bool kReadsOut, typename V, typename In, typename F>
__global__ void per_plane_kernel(V* out, In in, const float* v, int64_t planes, int64_t plane, int64_t period, F f) {
  for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
    const float s = v[p % period];
    V* op = out + p * plane;
    for (int64_t j = blockIdx.x * int64_t(blockDim.x) * kPlanePerThread + threadIdx.x; j < plane;
         j += int64_t(gridDim.x) * blockDim.x * kPlanePerThread) {
      V x[kPlanePerThread], old[kPlanePerThread];
#pragma unroll
      for (int u = 0; u < kPlanePerThread; ++u)
        if (j + u * blockDim.x < plane) {
          x[u] = in(p * plane + j + u * blockDim.x);
          old[u] = kReadsOut ? op[j + u * blockDim.x] : V{};
        }
#pragma unroll
      for (int u = 0; u < kPlanePerThread; ++u)
        if (j + u * blockDim.x < plane) op[j + u * blockDim.x] = apply_each(f, old[u], x[u], s);
    }
  }
}

// Launches per_plane_kernel on `stream` over `planes` planes of `plane` values of V each.
template <bool kReadsOut, typename V, typename In, typename F>
void per_plane(cudaStream_t stream, V* out, In in, const float* v, int64_t planes, int64_t plane, int64_t period,
               F f) {
  if (planes <= 0 || plane <= 0) return;
  const dim3 grid(grid_for((plane + kPlanePerThread - 1) / kPlanePerThread),
                  static_cast<unsigned>(std::clamp<int64_t>(planes, 1, 65535)));
  per_plane_kernel<kReadsOut><<<grid, kThreads, 0, stream>>>(out, in, v, planes, plane, period, f);
  check_launch();
}

// per_plane over fp32 maps: float4s where a plane holds a block's worth of them and out and `in`
// are 16-byte aligned, floats where it holds a block's worth of floats; false, launching nothing,
// for smaller planes (the caller's flat kernel serves those better). `in`: a const float*, or
// nullptr for none (NoInput).
template <bool kReadsOut, typename InPtr, typename F>
bool per_plane_f32(cudaStream_t stream, float* out, InPtr in, const float* v, int64_t planes, int64_t plane,
                   int64_t period, F f) {
  const auto input = [&](auto* typed_out) {  // `in` as the functor for out's element type
    using V = std::remove_pointer_t<decltype(typed_out)>;
    if constexpr (std::is_same_v<InPtr, std::nullptr_t>)
      return NoInput<V>{};
    else
      return Floats<V>{reinterpret_cast<const V*>(in)};
  };
  if (plane % 4 == 0 && plane / 4 >= kThreads && aligned16(out) && aligned16(in)) {
    auto* out4 = reinterpret_cast<float4*>(out);
    per_plane<kReadsOut>(stream, out4, input(out4), v, planes, plane / 4, period, f);
    return true;
  }
  if (plane < kThreads) return false;
  per_plane<kReadsOut>(stream, out, input(out), v, planes, plane, period, f);
  return true;
}

inline float* f32(const Tensor& t, const char* op, const char* name) {
  DPX_CHECK(t.defined(), op, ": ", name, " is not allocated");
  DPX_CHECK(t.dtype() == DType::f32, op, ": ", name, " must be f32, got ", dtype_name(t.dtype()));
  return static_cast<float*>(t.raw());
}

// ---- maps in fp32 or in half precision (kernels/ops.def, "half-precision maps") ----------------
// A map's element as a kernel reads and writes it: fp32 itself, or bf16/fp16 bits widened on load
// (exact) and rounded at the store (core/cuda/half.cuh), so that a half input gives the bits its
// widened copy would, and a half output the fp32 one's rounded.
struct XF32 {
  using T = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <typename H>
struct XHalf {
  using T = uint16_t;
  __device__ static float load(uint16_t v) { return H::load(v); }
  __device__ static uint16_t store(float v) { return H::store(v); }
};

// Calls f with the element type of a map's dtype (the op layer allows f32, bf16 and fp16).
template <typename F>
void with_x_type(DType dtype, F&& f) {
  if (dtype == DType::bf16)
    f(XHalf<BF16>{});
  else if (dtype == DType::f16)
    f(XHalf<F16>{});
  else
    f(XF32{});
}

// The data of a map (x, dx, y) as X's elements (f32 checked as every op's).
template <typename X>
typename X::T* x_data(const Tensor& t, const char* op, const char* name) {
  if constexpr (std::is_same_v<X, XF32>)
    return f32(t, op, name);
  else
    return static_cast<uint16_t*>(t.raw());
}

inline void check_numel(const Tensor& a, const Tensor& b, const char* op, const char* na,
                        const char* nb) {
  DPX_CHECK(a.numel() == b.numel(), op, ": ", na, " ", shape_str(a.shape()), " and ", nb, " ",
            shape_str(b.shape()), " must have the same number of elements");
}

inline void check_shape(const Tensor& t, const Shape& want, const char* op, const char* name) {
  DPX_CHECK(t.shape() == want, op, ": ", name, " has shape ", shape_str(t.shape()), ", expected ",
            shape_str(want));
}

// ---- elementwise maps --------------------------------------------------------------------------
// out[i] = f(in[0][i], ..., in[N-1][i]) for i in [0, n), as PyTorch's vectorised elementwise
// kernels do it: where every pointer is 16-byte aligned, each thread moves four consecutive
// elements with one float4 load per input and one store; indices are 32-bit where n allows; the
// last n % 4 elements, and every element of a call with an unaligned pointer, go one at a time.
// f (a functor with a __device__ operator()) sees one element at a time, so the results are the
// one-at-a-time loop's, bit for bit. `out` may also be an input (each element is read before it is
// written): an in-place or accumulating op.
template <int N>
struct MapInputs {
  const float* p[N];
};

template <typename F, int N, size_t... K>
__device__ inline float map_one(const F& f, const float (&v)[N][4], int j, std::index_sequence<K...>) {
  return f(v[K][j]...);
}

template <typename I, typename F, int N>
__global__ void map_kernel(float* out, MapInputs<N> in, I n, bool quads, F f) {
  const I stride = I(gridDim.x) * I(blockDim.x), first = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x);
  const I vectorised = quads ? n / 4 : 0;
  for (I q = first; q < vectorised; q += stride) {
    float v[N][4];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float4 t = reinterpret_cast<const float4*>(in.p[k])[q];
      v[k][0] = t.x;
      v[k][1] = t.y;
      v[k][2] = t.z;
      v[k][3] = t.w;
    }
    float r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) r[j] = map_one(f, v, j, std::make_index_sequence<N>{});
    reinterpret_cast<float4*>(out)[q] = make_float4(r[0], r[1], r[2], r[3]);
  }
  for (I i = vectorised * 4 + first; i < n; i += stride) {
    float v[N][4];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k][0] = in.p[k][i];
    out[i] = map_one(f, v, 0, std::make_index_sequence<N>{});
  }
}


// Launches map_kernel on `stream` (nothing when n is 0).
template <typename F, int N>
void map(cudaStream_t stream, float* out, const MapInputs<N>& in, int64_t n, F f) {
  if (n <= 0) return;
  bool quads = aligned16(out);
  for (int k = 0; k < N; ++k) quads = quads && aligned16(in.p[k]);
  const unsigned grid = grid_for(quads ? (n + 3) / 4 : n);
  if (fits_int32(n))
    map_kernel<int32_t><<<grid, kThreads, 0, stream>>>(out, in, static_cast<int32_t>(n), quads, f);
  else
    map_kernel<int64_t><<<grid, kThreads, 0, stream>>>(out, in, n, quads, f);
  check_launch();
}

// ---- half-precision operands (--precision bf16|fp16: Context::compute) ------------------------
// dst (n elements of `dtype`, bf16 or f16) = src * alpha, rounded as the host rounds; on `stream`.
void narrow(void* dst, DType dtype, const float* src, float alpha, int64_t n, cudaStream_t stream);
// dst = beta * dst + src widened to f32 (beta = 0 writes dst without reading it); on `stream`.
void widen_into(float* dst, float beta, const void* src, DType dtype, int64_t n, cudaStream_t stream);

// An f32 operand rounded to the compute dtype in scratch memory, for cuBLAS and cuDNN to read.
class HalfCopy {
 public:
  HalfCopy(const CudaState& st, const float* src, int64_t n, DType dtype)
      : buf_(st, static_cast<size_t>(n) * dtype_size(dtype)) {
    narrow(buf_.as<void>(), dtype, src, 1.f, n, st.stream);
  }
  const void* get() const { return buf_.as<void>(); }

 private:
  Scratch buf_;
};

// ---- activations folded into other ops ---------------------------------------------------------
// max(v, 0), written so that NaN passes (torch.relu's rule): relu_forward and every op that folds
// a ReLU in (a convolution's bias pass, batch norm's epilogue, add_relu).
__device__ inline float relu_of(float v) { return v < 0.f ? 0.f : v; }

// x * sigmoid(x), written x / (1 + e^-x) (no 0 * inf for very negative x), and its derivative
// s (1 + x (1 - s)) with s = sigmoid(x): silu_forward/silu_backward and batch norm's SiLU
// epilogue and folded backward (ops::Epilogue::silu), one formula for both.
__device__ inline float silu_of(float v) { return v / (1.f + expf(-v)); }
__device__ inline float silu_grad(float v) {
  const float s = 1.f / (1.f + expf(-v));
  return s * (1.f + v * (1.f - s));
}

// ---- deterministic reductions (device) -----------------------------------------------------
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__device__ inline T warp_max(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    T other = __shfl_down_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 33 values. The order of additions is fixed, so the result is reproducible.
template <typename T>
__device__ inline T block_sum(T v, T* shared) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? shared[lane] : T(0);
    w = warp_sum(w);
    if (lane == 0) shared[32] = w;
  }
  __syncthreads();
  T result = shared[32];
  __syncthreads();  // shared may be reused right after
  return result;
}

template <typename T>
__device__ inline T block_max(T v, T* shared, T lowest) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? shared[lane] : lowest;
    w = warp_max(w);
    if (lane == 0) shared[32] = w;
  }
  __syncthreads();
  T result = shared[32];
  __syncthreads();
  return result;
}

}  // namespace dpx::cuda::detail
