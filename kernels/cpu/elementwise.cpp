// CPU elementwise and utility ops: fill, copy, add, axpy, scale, cast, count_nonfinite(_into), increment_i64,
// poison_if_nonfinite. Each element depends only on its own inputs, so splitting the range over
// threads cannot change any result.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/host_half.hpp"

namespace dpx::cpu {

using namespace detail;

void fill(Context& ctx, Tensor& out, float value) {
  float* o = out.data<float>();
  const int64_t n = out.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) o[i] = value;
}

void increment_i64(Context&, Tensor& counter) { ++counter.data<int64_t>()[0]; }

void poison_if_nonfinite(Context& ctx, Tensor& x, const Tensor& value) {
  if (!std::isfinite(value.data<float>()[0])) fill(ctx, x, std::numeric_limits<float>::quiet_NaN());
}

// A byte copy, so any dtype works as long as both sides agree (labels are i64).
void copy(Context& ctx, Tensor& out, const Tensor& in) {
  if (out.raw() == in.raw()) return;
  auto* o = static_cast<char*>(out.raw());
  const auto* s = static_cast<const char*>(in.raw());
  const int64_t bytes = static_cast<int64_t>(out.nbytes());
  if (o < s + bytes && s < o + bytes) {  // partly overlapping views: only one ordered move is right
    std::memmove(o, s, static_cast<size_t>(bytes));
    return;
  }
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
  int nt = threads_for(ctx, bytes / 4);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b0 = c * kChunk, len = std::min(kChunk, bytes - b0);
    std::memmove(o + b0, s + b0, static_cast<size_t>(len));
  }
}

namespace {
// One direction of cast, its conversions (core/dtype.hpp) inlined into the threaded loop.
template <typename Load, typename Store>
void cast_loop(Context& ctx, int64_t n, float alpha, Load load, Store store) {
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) store(i, load(i) * alpha);
}
}  // namespace

void cast(Context& ctx, Tensor& out, const Tensor& in, float alpha) {
  const int64_t n = out.numel();
  const auto* fi = static_cast<const float*>(in.raw());
  const auto* hi = static_cast<const uint16_t*>(in.raw());
  auto* fo = static_cast<float*>(out.raw());
  auto* ho = static_cast<uint16_t*>(out.raw());
  auto from_f32 = [fi](int64_t i) { return fi[i]; };
  auto to_f32 = [fo](int64_t i, float v) { fo[i] = v; };
  switch (out.dtype()) {
    case DType::bf16: return cast_loop(ctx, n, alpha, from_f32, [ho](int64_t i, float v) { ho[i] = float_to_bf16(v); });
    case DType::f16: return cast_loop(ctx, n, alpha, from_f32, [ho](int64_t i, float v) { ho[i] = float_to_half(v); });
    default: break;
  }
  switch (in.dtype()) {
    case DType::bf16: return cast_loop(ctx, n, alpha, [hi](int64_t i) { return bf16_to_float(hi[i]); }, to_f32);
    case DType::f16: return cast_loop(ctx, n, alpha, [hi](int64_t i) { return half_to_float(hi[i]); }, to_f32);
    default: return cast_loop(ctx, n, alpha, from_f32, to_f32);
  }
}

void add(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  float* o = out.data<float>();
  const float *ap = a.data<float>(), *bp = b.data<float>();
  const int64_t n = out.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) o[i] = ap[i] + bp[i];
}

void add_relu(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  if (kernels::is_half(out) || kernels::is_half(b)) return kernels::add_relu_widened(add_relu, ctx, out, a, b);
  float* o = out.data<float>();
  const float *ap = a.data<float>(), *bp = b.data<float>();
  const int64_t n = out.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for simd num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) o[i] = relu_of(ap[i] + bp[i]);  // NaN passes, as relu_forward
}

void axpy(Context& ctx, Tensor& y, float alpha, const Tensor& x) {
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  const int64_t n = y.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) yp[i] += alpha * xp[i];
}

void scale(Context& ctx, Tensor& x, float alpha) {
  float* xp = x.data<float>();
  const int64_t n = x.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) xp[i] *= alpha;
}

int64_t count_nonfinite(Context& ctx, const Tensor& x) {
  const float* xp = x.data<float>();
  const int64_t n = x.numel();
  int64_t count = 0;
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1) reduction(+ : count)
  for (int64_t i = 0; i < n; ++i) count += std::isfinite(xp[i]) ? 0 : 1;
  return count;
}

void count_nonfinite_into(Context& ctx, Tensor& count, const Tensor& x) {
  count.data<int64_t>()[0] = count_nonfinite(ctx, x);
}

}  // namespace dpx::cpu
