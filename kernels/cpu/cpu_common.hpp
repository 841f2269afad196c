// Helpers shared by the CPU kernels (not part of the op list): the thread count a kernel should
// use, per-call scratch memory, and a thread-count-invariant GEMM. The op layer checks every argument before a kernel
// runs (kernels/op_checks.cpp); what a kernel still checks (labels, indices) it checks before
// an OpenMP region: an exception must not leave one.
#pragma once
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <type_traits>

#include "core/context.hpp"
#include "core/tensor.hpp"

namespace dpx::cpu::detail {

// Below this many elements (or multiply-adds) per op a parallel region costs more than it saves.
inline constexpr int64_t kMinParallelWork = 1 << 15;

// Threads for an op of `work` elements: ctx.threads, or 1 when the op is too small to share.
inline int threads_for(const Context& ctx, int64_t work) {
  return (ctx.threads > 1 && work >= kMinParallelWork) ? ctx.threads : 1;
}

// max(v, 0) with NaN passing, as torch.relu: relu_forward and the ReLU epilogues of batch norm and
// convolution (ops::Epilogue::relu).
inline float relu_of(float v) { return v < 0.f ? 0.f : v; }

// out[i] = relu_of(in[i]) for i < n (out may be in), over threads_for(ctx, n) threads.
inline void relu_into(const Context& ctx, float* out, const float* in, int64_t n) {
  const int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) out[i] = relu_of(in[i]);
}

// A sum in double over kLanes partial sums: element i of a row goes into lane i % kLanes, and the
// lanes are added in lane order at the end. One running sum is a chain of dependent adds (a
// float->double add every 4 cycles); sixteen lanes are two AVX-512 registers of independent adds,
// at the memory's speed. The result depends on the rows' lengths and order only, never on threads.
class LaneSum {
 public:
  static constexpr int kLanes = 16;
  // Adds f(0) ... f(n - 1), f(i) a double.
  template <class F>
  void add(int64_t n, F&& f) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lane_[j] += f(i + j);
    for (int j = 0; i < n; ++i, ++j) lane_[j] += f(i);
  }
  double total() const {
    double t = 0;
    for (double v : lane_) t += v;
    return t;
  }

 private:
  double lane_[kLanes] = {};
};

// The sum over n and i of x[(n * C + c) * S + i], in double (LaneSum, rows in n order): channel c
// of x (N, C, S) — a batch-norm mean, a convolution's bias gradient.
inline double channel_sum(const float* x, int64_t N, int64_t C, int64_t S, int64_t c) {
  LaneSum sum;
  for (int64_t n = 0; n < N; ++n) {
    const float* in = x + (n * C + c) * S;
    sum.add(S, [in](int64_t i) { return static_cast<double>(in[i]); });
  }
  return sum.total();
}

// Scratch memory for one kernel call: `count` elements of a trivially copyable T, 64-byte aligned,
// zeroed only when asked. It comes from the host tensor cache (allocate_storage, core/tensor.cpp)
// and goes back there when the Scratch ends, so a kernel that runs every step reuses the same
// block instead of asking the system for one each call.
template <class T>
class Scratch {
  static_assert(std::is_trivially_copyable_v<T>, "Scratch holds plain values (no constructors run)");

 public:
  explicit Scratch(int64_t count, bool zero = false)
      : storage_(allocate_storage(static_cast<size_t>(count) * sizeof(T), Device::cpu())), count_(count) {
    if (zero && count > 0) std::memset(storage_->data, 0, static_cast<size_t>(count) * sizeof(T));
  }
  T* data() const { return static_cast<T*>(storage_->data); }
  int64_t size() const { return count_; }
  T& operator[](int64_t i) const { return data()[i]; }

 private:
  std::shared_ptr<Storage> storage_;
  int64_t count_;
};

// Row-major C (M, N) = alpha * op(A) op(B) + beta * C, where op(A) is (M, K) and op(B) is
// (K, N); A is stored (M, K) or, with trans_a, (K, M); likewise B. beta == 0 never reads C.
// C is cut into fixed tiles that depend only on M, N and K, and each tile is one
// single-threaded product (gemm_one below), so the result is bitwise the same for any thread count.
void gemm(int threads, int64_t M, int64_t N, int64_t K, const float* A, bool trans_a,
          const float* B, bool trans_b, float* C, float alpha, float beta);

// The same product on the calling thread alone, row-major with leading dimensions lda, ldb and
// ldc (A is (M, K) or, with trans_a, (K, M)): oneDNN's sgemm where dpx is built with it, Eigen's
// otherwise. The tile GEMM above and the convolutions' per-unit products are made of it.
void gemm_one(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
              int64_t ldc);

// Sets this thread's OpenMP thread count (omp_get_max_threads()) for a scope and restores it after:
// oneDNN's OpenMP build takes that many threads when a primitive is made and when it runs.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : old_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(old_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int old_;
};

}  // namespace dpx::cpu::detail
