// Elementwise CUDA ops: fill, copy, add, axpy, scale, cast, count_nonfinite(_into), increment_i64,
// poison_if_nonfinite (the CPU ops' checks and results).
// add, axpy, scale and the f32 cast are detail::map's four-at-a-time loops (common.cuh), fill its
// own; the rest grid-stride loops with 64-bit indices. All work is queued on the Context's stream.
#include "core/cuda/half.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;
using detail::grid_for;
using detail::kThreads;

// Four values a thread with one 16-byte store where `out` is aligned, else one (as detail::map).
__global__ void fill_kernel(float* out, float value, int64_t n, bool quads) {
  const int64_t vectorised = quads ? n / 4 : 0;
  DPX_CUDA_LOOP(q, vectorised)
    reinterpret_cast<float4*>(out)[q] = make_float4(value, value, value, value);
  for (int64_t i = vectorised * 4 + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Axpy {  // y + alpha * x
  float alpha;
  __device__ float operator()(float y, float x) const { return y + alpha * x; }
};
struct Scale {
  float alpha;
  __device__ float operator()(float x) const { return x * alpha; }
};

// One atomic per block: each thread counts its elements, the block sums in shared memory.
__global__ void count_nonfinite_kernel(unsigned long long* count, const float* x, int64_t n) {
  __shared__ unsigned long long block_count;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  unsigned long long mine = 0;
  DPX_CUDA_LOOP(i, n)
    mine += isfinite(x[i]) ? 0 : 1;
  if (mine) atomicAdd(&block_count, mine);
  __syncthreads();
  if (threadIdx.x == 0 && block_count) atomicAdd(count, block_count);
}

__global__ void increment_i64_kernel(long long* counter) { *counter += 1; }

// Reads the value on the device: no host round trip, so it can be recorded in a CUDA graph.
__global__ void poison_if_nonfinite_kernel(float* x, const float* value, int64_t n) {
  if (isfinite(*value)) return;
  DPX_CUDA_LOOP(i, n)
    x[i] = __int_as_float(0x7fc00000);  // a quiet NaN
}

// Half-precision casts (H: F16 or BF16 of core/cuda/half.cuh, the host's rounding).
template <typename H>
__global__ void narrow_kernel(uint16_t* dst, const float* src, float alpha, int64_t n) {
  DPX_CUDA_LOOP(i, n)
    dst[i] = H::store(src[i] * alpha);
}

template <typename H>
__global__ void widen_kernel(float* dst, float alpha, float beta, const uint16_t* src, int64_t n) {
  DPX_CUDA_LOOP(i, n) {
    const float v = H::load(src[i]) * alpha;
    dst[i] = beta == 0.f ? v : beta * dst[i] + v;  // not 0 + v, which would turn -0 into +0
  }
}

void check_half(DType dtype) {
  DPX_CHECK(dtype == DType::bf16 || dtype == DType::f16, "a half-precision cast needs bf16 or f16, not ",
            dtype_name(dtype));
}

void widen(float* dst, float alpha, float beta, const void* src, DType dtype, int64_t n, cudaStream_t stream) {
  check_half(dtype);
  if (n == 0) return;
  const auto* h = static_cast<const uint16_t*>(src);
  if (dtype == DType::bf16)
    widen_kernel<BF16><<<grid_for(n), kThreads, 0, stream>>>(dst, alpha, beta, h, n);
  else
    widen_kernel<F16><<<grid_for(n), kThreads, 0, stream>>>(dst, alpha, beta, h, n);
  check_launch();
}

}  // namespace

namespace detail {

void narrow(void* dst, DType dtype, const float* src, float alpha, int64_t n, cudaStream_t stream) {
  check_half(dtype);
  if (n == 0) return;
  auto* h = static_cast<uint16_t*>(dst);
  if (dtype == DType::bf16)
    narrow_kernel<BF16><<<grid_for(n), kThreads, 0, stream>>>(h, src, alpha, n);
  else
    narrow_kernel<F16><<<grid_for(n), kThreads, 0, stream>>>(h, src, alpha, n);
  check_launch();
}

void widen_into(float* dst, float beta, const void* src, DType dtype, int64_t n, cudaStream_t stream) {
  widen(dst, 1.f, beta, src, dtype, n, stream);
}

}  // namespace detail

void cast(Context& ctx, Tensor& out, const Tensor& in, float alpha) {
  CudaState& st = state_of(ctx);
  const int64_t n = out.numel();
  if (n == 0) return;
  if (out.dtype() != DType::f32) {
    detail::narrow(out.raw(), out.dtype(), f32(in, "cast", "in"), alpha, n, st.stream);
  } else if (in.dtype() != DType::f32) {
    widen(static_cast<float*>(out.raw()), alpha, 0.f, in.raw(), in.dtype(), n, st.stream);
  } else {
    detail::map(st.stream, static_cast<float*>(out.raw()), detail::MapInputs<1>{{f32(in, "cast", "in")}}, n,
                Scale{alpha});
  }
}

void increment_i64(Context& ctx, Tensor& counter) {
  CudaState& st = state_of(ctx);
  increment_i64_kernel<<<1, 1, 0, st.stream>>>(static_cast<long long*>(counter.raw()));
  check_launch();
}

void poison_if_nonfinite(Context& ctx, Tensor& x, const Tensor& value) {
  CudaState& st = state_of(ctx);
  const int64_t n = x.numel();
  if (n == 0) return;
  poison_if_nonfinite_kernel<<<grid_for(n), kThreads, 0, st.stream>>>(f32(x, "poison_if_nonfinite", "x"),
                                                                       f32(value, "poison_if_nonfinite", "value"), n);
  check_launch();
}

void fill(Context& ctx, Tensor& out, float value) {
  CudaState& st = state_of(ctx);
  float* p = f32(out, "fill", "out");
  int64_t n = out.numel();
  if (n == 0) return;
  const bool quads = detail::aligned16(p);
  fill_kernel<<<grid_for(quads ? (n + 3) / 4 : n), kThreads, 0, st.stream>>>(p, value, n, quads);
  check_launch();
}

// A byte copy, so any dtype works as long as both sides agree (as the CPU op).
void copy(Context& ctx, Tensor& out, const Tensor& in) {
  CudaState& st = state_of(ctx);
  size_t bytes = out.nbytes();
  if (bytes == 0 || out.raw() == in.raw()) return;
  const char* o = static_cast<const char*>(out.raw());
  const char* s = static_cast<const char*>(in.raw());
  if (o < s + bytes && s < o + bytes) {
    // Partly overlapping views: cudaMemcpy's result is undefined there, so go through a copy.
    detail::Scratch tmp(st, bytes);
    DPX_CUDA_CHECK(cudaMemcpyAsync(tmp.as<void>(), in.raw(), bytes, cudaMemcpyDeviceToDevice, st.stream));
    DPX_CUDA_CHECK(cudaMemcpyAsync(out.raw(), tmp.as<void>(), bytes, cudaMemcpyDeviceToDevice, st.stream));
    return;
  }
  DPX_CUDA_CHECK(cudaMemcpyAsync(out.raw(), in.raw(), bytes, cudaMemcpyDeviceToDevice, st.stream));
}

void add(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  CudaState& st = state_of(ctx);
  int64_t n = out.numel();
  if (n == 0) return;
  detail::map(st.stream, f32(out, "add", "out"), detail::MapInputs<2>{{f32(a, "add", "a"), f32(b, "add", "b")}}, n,
              Add{});
}

void axpy(Context& ctx, Tensor& y, float alpha, const Tensor& x) {
  CudaState& st = state_of(ctx);
  int64_t n = y.numel();
  if (n == 0) return;
  float* py = f32(y, "axpy", "y");
  detail::map(st.stream, py, detail::MapInputs<2>{{py, f32(x, "axpy", "x")}}, n, Axpy{alpha});
}

void scale(Context& ctx, Tensor& x, float alpha) {
  CudaState& st = state_of(ctx);
  int64_t n = x.numel();
  if (n == 0) return;
  float* px = f32(x, "scale", "x");
  detail::map(st.stream, px, detail::MapInputs<1>{{px}}, n, Scale{alpha});
}

namespace {
// Zeroes *count, then counts x's NaN and infinite elements into it, on the stream.
void count_nonfinite_on(CudaState& st, unsigned long long* count, const Tensor& x) {
  DPX_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof *count, st.stream));
  const int64_t n = x.numel();
  if (n == 0) return;
  count_nonfinite_kernel<<<grid_for(n), kThreads, 0, st.stream>>>(count, f32(x, "count_nonfinite", "x"), n);
  check_launch();
}
}  // namespace

void count_nonfinite_into(Context& ctx, Tensor& count, const Tensor& x) {
  static_assert(sizeof(unsigned long long) == sizeof(int64_t));
  count_nonfinite_on(state_of(ctx), static_cast<unsigned long long*>(count.raw()), x);
}

int64_t count_nonfinite(Context& ctx, const Tensor& x) {
  CudaState& st = state_of(ctx);
  if (x.numel() == 0) return 0;
  detail::Scratch counter(st, sizeof(unsigned long long));
  count_nonfinite_on(st, counter.as<unsigned long long>(), x);
  unsigned long long count = 0;
  DPX_CUDA_CHECK(cudaMemcpyAsync(&count, counter.as<void>(), sizeof count, cudaMemcpyDeviceToHost, st.stream));
  DPX_CUDA_CHECK(cudaStreamSynchronize(st.stream));
  return static_cast<int64_t>(count);
}

}  // namespace dpx::cuda
