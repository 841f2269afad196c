// The p2p backend's reduction kernels (p2p_reduce.hpp): one grid-stride loop per dtype and op,
// element for element what parallel/comm/transport.cpp computes on the host, so the p2p backend's
// results equal the threads backend's bit for bit (tests/cuda/test_p2p.cpp).
#include <type_traits>

#include "core/cuda/check.hpp"
#include "core/cuda/half.cuh"
#include "core/error.hpp"
#include "parallel/comm/p2p/cuda/p2p_reduce.hpp"

namespace dpx::parallel::cuda_p2p {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > (size_t{1} << 16) ? (size_t{1} << 16) : blocks);
}

#define DPX_P2P_LOOP(i, n) \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

using dpx::cuda::BF16;  // core/cuda/half.cuh: the host's rounding, bit for bit
using dpx::cuda::F16;

template <typename T>
__device__ T combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {  // wrapping, as the host's wrap_add / wrap_mul
      case ReduceOp::sum: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case ReduceOp::prod:
        return static_cast<T>(static_cast<uint64_t>(static_cast<U>(a)) * static_cast<uint64_t>(static_cast<U>(b)));
      default: break;
    }
  } else {
    switch (op) {
      case ReduceOp::sum: return a + b;
      case ReduceOp::prod: return a * b;
      default: break;
    }
  }
  return op == ReduceOp::max ? (b > a ? b : a) : (b < a ? b : a);
}

template <typename T>
__global__ void reduce_kernel(T* out, const T* a, const T* b, size_t n, ReduceOp op) {
  DPX_P2P_LOOP(i, n) out[i] = combine(a[i], b[i], op);
}

template <typename Conv>
__global__ void reduce_16_kernel(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n, ReduceOp op) {
  DPX_P2P_LOOP(i, n) out[i] = Conv::store(combine(Conv::load(a[i]), Conv::load(b[i]), op));
}

template <typename T>
__global__ void divide_kernel(T* data, size_t n, int ranks) {
  using D = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
  const D d = static_cast<D>(ranks);
  DPX_P2P_LOOP(i, n) data[i] = static_cast<T>(static_cast<D>(data[i]) / d);
}

template <typename Conv>
__global__ void divide_16_kernel(uint16_t* data, size_t n, int ranks) {
  const float d = static_cast<float>(ranks);
  DPX_P2P_LOOP(i, n) data[i] = Conv::store(Conv::load(data[i]) / d);
}

template <typename T>
void launch_reduce(void* out, const void* a, const void* b, size_t n, ReduceOp op, cudaStream_t s) {
  reduce_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                    static_cast<const T*>(b), n, op);
}

template <typename T>
void launch_divide(void* data, size_t n, int ranks, cudaStream_t s) {
  divide_kernel<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(data), n, ranks);
}

}  // namespace

void reduce_into(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op,
                 cudaStream_t stream) {
  if (count == 0) return;
  if (op == ReduceOp::avg) fail("p2p reduce_into: avg is reduced as sum and finished with finish_average");
  auto* o16 = static_cast<uint16_t*>(out);
  auto* a16 = static_cast<const uint16_t*>(a);
  auto* b16 = static_cast<const uint16_t*>(b);
  switch (dtype) {
    case DType::f32: launch_reduce<float>(out, a, b, count, op, stream); break;
    case DType::f64: launch_reduce<double>(out, a, b, count, op, stream); break;
    case DType::i32: launch_reduce<int32_t>(out, a, b, count, op, stream); break;
    case DType::i64: launch_reduce<int64_t>(out, a, b, count, op, stream); break;
    case DType::u8: launch_reduce<uint8_t>(out, a, b, count, op, stream); break;
    case DType::f16: reduce_16_kernel<F16><<<grid_for(count), kThreads, 0, stream>>>(o16, a16, b16, count, op); break;
    case DType::bf16: reduce_16_kernel<BF16><<<grid_for(count), kThreads, 0, stream>>>(o16, a16, b16, count, op); break;
  }
  cuda::check_launch();
}

void finish_average(void* data, size_t count, DType dtype, int ranks, cudaStream_t stream) {
  if (count == 0 || ranks == 1) return;
  auto* d16 = static_cast<uint16_t*>(data);
  switch (dtype) {
    case DType::f32: launch_divide<float>(data, count, ranks, stream); break;
    case DType::f64: launch_divide<double>(data, count, ranks, stream); break;
    case DType::i32: launch_divide<int32_t>(data, count, ranks, stream); break;
    case DType::i64: launch_divide<int64_t>(data, count, ranks, stream); break;
    case DType::u8: launch_divide<uint8_t>(data, count, ranks, stream); break;
    case DType::f16: divide_16_kernel<F16><<<grid_for(count), kThreads, 0, stream>>>(d16, count, ranks); break;
    case DType::bf16: divide_16_kernel<BF16><<<grid_for(count), kThreads, 0, stream>>>(d16, count, ranks); break;
  }
  cuda::check_launch();
}

}  // namespace dpx::parallel::cuda_p2p
