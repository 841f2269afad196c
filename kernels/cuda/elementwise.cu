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
struct AddRelu {  // max(a + b, 0), NaN passing as relu_forward
  __device__ float operator()(float a, float b) const { return detail::relu_of(a + b); }
};

// add_relu where out or b is a bf16/fp16 map (B, Y: detail::XF32 or XHalf): b widened on load,
// out rounded at the store.
template <typename B, typename Y>
__global__ void add_relu_kernel(typename Y::T* out, const float* a, const typename B::T* b, int64_t n) {
  DPX_CUDA_LOOP(i, n) out[i] = Y::store(AddRelu{}(a[i], B::load(b[i])));
}
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

// Half-precision casts (H: F16 or BF16 of core/cuda/half.cuh, the host's rounding). `quads`: 4
// values a thread, one float4 and one 8-byte word of halves, where both pointers allow it. One
// 2-byte value a thread moved an estimated 1.5-2.5 TB/s of the H200's 4.8 (resnet50's bf16
// convolutions against its TF32 ones, 2026-11-28: the difference is the bytes of these casts), and
// bf16 convolutions narrow and widen every operand and result. The tail past the last whole quad,
// or everything without quads, one a thread.
template <typename H, typename I>
__global__ void narrow_kernel(uint16_t* dst, const float* src, float alpha, I n, bool quads) {
  const I stride = I(gridDim.x) * I(blockDim.x), first = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x);
  const I vectorised = quads ? n / 4 : 0;
  for (I q = first; q < vectorised; q += stride) {
    const float4 v = reinterpret_cast<const float4*>(src)[q];
    reinterpret_cast<uint2*>(dst)[q] = store4<H>(make_float4(v.x * alpha, v.y * alpha, v.z * alpha, v.w * alpha));
  }
  for (I i = vectorised * 4 + first; i < n; i += stride) dst[i] = H::store(src[i] * alpha);
}

__device__ inline float widened(float old, float v, float beta) {
  return beta == 0.f ? v : beta * old + v;  // not 0 + v, which would turn -0 into +0
}

template <typename H, typename I>
__global__ void widen_kernel(float* dst, float alpha, float beta, const uint16_t* src, I n, bool quads) {
  const I stride = I(gridDim.x) * I(blockDim.x), first = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x);
  const I vectorised = quads ? n / 4 : 0;
  for (I q = first; q < vectorised; q += stride) {
    const float4 v = load4<H>(reinterpret_cast<const uint2*>(src)[q]);
    float4 old = make_float4(0.f, 0.f, 0.f, 0.f);
    if (beta != 0.f) old = reinterpret_cast<const float4*>(dst)[q];
    reinterpret_cast<float4*>(dst)[q] =
        make_float4(widened(old.x, v.x * alpha, beta), widened(old.y, v.y * alpha, beta),
                    widened(old.z, v.z * alpha, beta), widened(old.w, v.w * alpha, beta));
  }
  for (I i = vectorised * 4 + first; i < n; i += stride)
    dst[i] = widened(beta == 0.f ? 0.f : dst[i], H::load(src[i]) * alpha, beta);
}

// Calls launch(H, count, grid, quads) for a cast of n values: H by `dtype` (BF16 or F16), count n
// as int32_t where it allows, quads where the fp32 side is 16-byte and the half side 8-byte aligned.
template <typename F>
void launch_cast(DType dtype, int64_t n, const void* fp32_side, const void* half_side, F launch) {
  const bool quads = detail::aligned16(fp32_side) && reinterpret_cast<uintptr_t>(half_side) % sizeof(uint2) == 0;
  const unsigned grid = grid_for(quads ? (n + 3) / 4 : n);
  const auto with_count = [&](auto h) {
    if (detail::fits_int32(n))
      launch(h, static_cast<int32_t>(n), grid, quads);
    else
      launch(h, n, grid, quads);
  };
  if (dtype == DType::bf16)
    with_count(BF16{});
  else
    with_count(F16{});
  check_launch();
}

void check_half(DType dtype) {
  DPX_CHECK(dtype == DType::bf16 || dtype == DType::f16, "a half-precision cast needs bf16 or f16, not ",
            dtype_name(dtype));
}

void widen(float* dst, float alpha, float beta, const void* src, DType dtype, int64_t n, cudaStream_t stream) {
  check_half(dtype);
  if (n == 0) return;
  const auto* h = static_cast<const uint16_t*>(src);
  launch_cast(dtype, n, dst, src, [&](auto type, auto count, unsigned grid, bool quads) {
    widen_kernel<decltype(type)><<<grid, kThreads, 0, stream>>>(dst, alpha, beta, h, count, quads);
  });
}

}  // namespace

namespace detail {

void narrow(void* dst, DType dtype, const float* src, float alpha, int64_t n, cudaStream_t stream) {
  check_half(dtype);
  if (n == 0) return;
  auto* h = static_cast<uint16_t*>(dst);
  launch_cast(dtype, n, src, dst, [&](auto type, auto count, unsigned grid, bool quads) {
    narrow_kernel<decltype(type)><<<grid, kThreads, 0, stream>>>(h, src, alpha, count, quads);
  });
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

void add_relu(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  CudaState& st = state_of(ctx);
  const int64_t n = out.numel();
  if (n == 0) return;
  const char* op = "add_relu";
  if (out.dtype() == DType::f32 && b.dtype() == DType::f32) {
    detail::map(st.stream, f32(out, op, "out"), detail::MapInputs<2>{{f32(a, op, "a"), f32(b, op, "b")}}, n,
                AddRelu{});
    return;
  }
  detail::with_x_type(b.dtype(), [&](auto b_type) {
    using B = decltype(b_type);
    detail::with_x_type(out.dtype(), [&](auto out_type) {
      using Y = decltype(out_type);
      add_relu_kernel<B, Y><<<detail::grid_for(n), detail::kThreads, 0, st.stream>>>(
          detail::x_data<Y>(out, op, "out"), f32(a, op, "a"), detail::x_data<B>(b, op, "b"), n);
      check_launch();
    });
  });
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
