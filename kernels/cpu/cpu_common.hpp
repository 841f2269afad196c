// Helpers shared by the CPU kernels (not part of the op list): the thread count a kernel should
// use, and a thread-count-invariant GEMM. The op layer checks every argument before a kernel
// runs (kernels/op_checks.cpp); what a kernel still checks (labels, indices) it checks before
// an OpenMP region: an exception must not leave one.
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

// The sum over n and i of x[(n * C + c) * S + i], in double, in that order: channel c of x
// (N, C, S) — a batch-norm mean, a convolution's bias gradient.
inline double channel_sum(const float* x, int64_t N, int64_t C, int64_t S, int64_t c) {
  double sum = 0;
  for (int64_t n = 0; n < N; ++n) {
    const float* in = x + (n * C + c) * S;
    for (int64_t i = 0; i < S; ++i) sum += in[i];
  }
  return sum;
}

// Row-major C (M, N) = alpha * op(A) op(B) + beta * C, where op(A) is (M, K) and op(B) is
// (K, N); A is stored (M, K) or, with trans_a, (K, M); likewise B. beta == 0 never reads C.
// C is cut into fixed tiles that depend only on M, N and K, and each tile is one
// single-threaded Eigen product, so the result is bitwise the same for any thread count.
void gemm(int threads, int64_t M, int64_t N, int64_t K, const float* A, bool trans_a,
          const float* B, bool trans_b, float* C, float alpha, float beta);

}  // namespace dpx::cpu::detail
