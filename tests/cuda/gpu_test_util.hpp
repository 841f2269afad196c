// Helpers for the GPU suite: one CudaState for cuda:0, seeded random host inputs, and the two
// comparisons the suite uses — element-wise relative to max(|a|, |b|, 1) for ops whose every
// output is a short computation, and norm-wise ||a - b|| / ||b|| for long reductions.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda/context.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "kernels/ops.hpp"
#include "tests/common/compare.hpp"

namespace dpx::gpu_test {

// Leaked on purpose: destroying handles after main() returns races the CUDA runtime's teardown.
inline cuda::CudaState& state() {
  static cuda::CudaState* st = cuda::make_cuda_state(0).release();
  return *st;
}

// fp32 without TF32 unless a test asks for it: the CPU results are fp32 references.
inline Context gpu(bool allow_tf32 = false) { return cuda::make_cuda_context(state(), allow_tf32); }
inline Context cpu() { return Context::cpu(2); }
inline Device dev() { return Device::cuda(0); }

inline Tensor uniform(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed, 17);
  fill_uniform(t, rng, lo, hi);
  return t;
}

inline Tensor labels(int64_t n, int64_t classes, uint64_t seed) {
  Tensor t = Tensor::empty({n}, DType::i64);
  Rng rng(seed, 5);
  for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = static_cast<int64_t>(rng.bits_at(i) % classes);
  return t;
}

// Largest |a_i - b_i| / max(|a_i|, |b_i|, 1): relative for large values, absolute near zero,
// where the CPU and GPU may legitimately round a cancelling sum differently.
inline double max_rel_diff(const Tensor& got, const Tensor& want) {
  auto a = got.to_vector(), b = want.to_vector();
  REQUIRE(a.size() == b.size());
  return dpx::testing::max_rel_diff(a, b);
}

// ||a - b|| / ||b||. For GEMM- and reduction-based ops (linear, matmul, conv, batch-norm
// gradients): cuBLAS/cuDNN sum hundreds of products in another order than the CPU, so a single
// output that nearly cancels can differ far more than 1e-5 relative to itself while the result
// as a whole agrees to fp32 rounding (about sqrt(K) * 6e-8); TF32 would give about 1e-4 to 1e-3.
inline double norm_rel_diff(const Tensor& got, const Tensor& want) {
  auto a = got.to_vector(), b = want.to_vector();
  REQUIRE(a.size() == b.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return ref == 0 ? std::sqrt(diff) : std::sqrt(diff / ref);
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

// A device tensor of `shape` filled with NaN: outputs start poisoned, so an element the kernel
// forgets to write shows up in every comparison.
inline Tensor poisoned(const Shape& shape) {
  Tensor h = Tensor::empty(shape);
  std::fill(h.data<float>(), h.data<float>() + h.numel(), NAN);
  return h.to(dev());
}

}  // namespace dpx::gpu_test
