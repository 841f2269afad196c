// Helpers shared by the CPU kernels (not part of the op list): argument checks that name the
// op and the shapes, the thread count a kernel should use, and a thread-count-invariant GEMM.
// Everything that can throw runs before an OpenMP region: an exception must not leave one.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "core/context.hpp"
#include "core/tensor.hpp"

namespace dpx::cpu::detail {

// Below this many elements (or multiply-adds) per op a parallel region costs more than it saves.
inline constexpr int64_t kMinParallelWork = 1 << 15;

// Threads for an op of `work` elements: ctx.threads, or 1 when the op is too small to share.
inline int threads_for(const Context& ctx, int64_t work) {
  return (ctx.threads > 1 && work >= kMinParallelWork) ? ctx.threads : 1;
}

inline void require_defined(const char* op, const char* name, const Tensor& t) {
  if (!t.defined()) fail(op, ": ", name, " is an undefined tensor; allocate it before the call");
}

inline void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  require_defined(op, name, t);
  if (t.dtype() != dtype)
    fail(op, ": ", name, " ", shape_str(t.shape()), " must be ", dtype_name(dtype), ", got ",
         dtype_name(t.dtype()));
}

inline void require_f32(const char* op, const char* name, const Tensor& t) {
  require_dtype(op, name, t, DType::f32);
}

inline void require_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  require_defined(op, name, t);
  if (t.shape() != shape)
    fail(op, ": ", name, " has shape ", shape_str(t.shape()), ", expected ", shape_str(shape));
}

inline void require_dim(const char* op, const char* name, const Tensor& t, int dim) {
  require_defined(op, name, t);
  if (t.dim() != dim)
    fail(op, ": ", name, " must have ", dim, " dimensions, got shape ", shape_str(t.shape()));
}

inline void require_same_numel(const char* op, const char* a_name, const Tensor& a,
                               const char* b_name, const Tensor& b) {
  if (a.numel() != b.numel())
    fail(op, ": ", a_name, " ", shape_str(a.shape()), " and ", b_name, " ", shape_str(b.shape()),
         " must have the same number of elements");
}

// Row-major C (M, N) = alpha * op(A) op(B) + beta * C, where op(A) is (M, K) and op(B) is
// (K, N); A is stored (M, K) or, with trans_a, (K, M); likewise B. beta == 0 never reads C.
// C is cut into fixed tiles that depend only on M, N and K, and each tile is one
// single-threaded Eigen product, so the result is bitwise the same for any thread count.
void gemm(int threads, int64_t M, int64_t N, int64_t K, const float* A, bool trans_a,
          const float* B, bool trans_b, float* C, float alpha, float beta);

}  // namespace dpx::cpu::detail
