// Reference elementwise and utility ops: fill, copy, add, axpy, scale, cast, count_nonfinite(_into),
// increment_i64, poison_if_nonfinite.
// One loop over the elements each; nothing depends on any other element.
#include <cmath>
#include <cstring>

#include "kernels/host_half.hpp"
#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

void fill(Context&, Tensor& out, float value) {
  float* o = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = value;
}

void increment_i64(Context&, Tensor& counter) { counter.data<int64_t>()[0] += 1; }

void poison_if_nonfinite(Context&, Tensor& x, const Tensor& value) {
  if (std::isfinite(value.data<float>()[0])) return;
  float* o = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = std::nanf("");
}

// A byte copy, so any dtype works (both sides have the same dtype). memmove, not memcpy: the
// two may be overlapping views of one storage.
void copy(Context&, Tensor& out, const Tensor& in) {
  std::memmove(out.raw(), in.raw(), out.nbytes());
}

void add(Context&, Tensor& out, const Tensor& a, const Tensor& b) {
  float* o = out.data<float>();
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = x[i] + y[i];
}

// out = max(a + b, 0), written `v < 0 ? 0 : v` so that NaN passes (relu_forward's rule).
void add_relu(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  if (kernels::is_half(out) || kernels::is_half(b)) return kernels::add_relu_widened(add_relu, ctx, out, a, b);
  float* o = out.data<float>();
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    const float v = x[i] + y[i];
    o[i] = v < 0.f ? 0.f : v;
  }
}

// y += alpha * x
void axpy(Context&, Tensor& y, float alpha, const Tensor& x) {
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) yp[i] += alpha * xp[i];
}

// x *= alpha
void scale(Context&, Tensor& x, float alpha) {
  float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) xp[i] *= alpha;
}

// out = in * alpha rounded to out's dtype; f16/bf16 go through f32 (core/dtype.hpp's rounding).
void cast(Context&, Tensor& out, const Tensor& in, float alpha) {
  const auto* h_in = static_cast<const uint16_t*>(in.raw());
  auto* h_out = static_cast<uint16_t*>(out.raw());
  auto load = [&](int64_t i) {
    switch (in.dtype()) {
      case DType::bf16: return bf16_to_float(h_in[i]);
      case DType::f16: return half_to_float(h_in[i]);
      default: return static_cast<const float*>(in.raw())[i];
    }
  };
  for (int64_t i = 0; i < out.numel(); ++i) {
    const float v = load(i) * alpha;
    switch (out.dtype()) {
      case DType::bf16: h_out[i] = float_to_bf16(v); break;
      case DType::f16: h_out[i] = float_to_half(v); break;
      default: static_cast<float*>(out.raw())[i] = v;
    }
  }
}

// How many elements are NaN, +inf or -inf.
int64_t count_nonfinite(Context&, const Tensor& x) {
  const float* xp = x.data<float>();
  int64_t count = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (!std::isfinite(xp[i])) ++count;
  return count;
}

void count_nonfinite_into(Context& ctx, Tensor& count, const Tensor& x) {
  count.data<int64_t>()[0] = count_nonfinite(ctx, x);
}

}  // namespace dpx::ref
