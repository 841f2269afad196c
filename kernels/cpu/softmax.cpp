// CPU softmax over the last dimension, with an optional additive bias broadcast over the leading
// dimensions (attention scores plus a position bias or a window mask), and its backward. Rows
// are independent and each is summed in a fixed order (detail::LaneSum), so results do not
// depend on threads. exp is glibc's vector expf (libmvec.hpp, at most 4 ulp); which elements of
// a row take the vector path depends on the row's length and position only.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/libmvec.hpp"

namespace dpx::cpu {

using namespace detail;

void softmax_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor* bias) {
  const int64_t L = x.size(-1), rows = x.numel() / L;
  const float* bp = nullptr;
  int64_t bias_rows = 1;
  if (bias && bias->defined()) {
    bp = bias->data<float>();
    bias_rows = bias->numel() / L;
  }
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  int nt = threads_for(ctx, x.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = xp + r * L;
    const float* b = bp ? bp + (r % bias_rows) * L : nullptr;
    float* out = yp + r * L;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < L; ++i) {
      out[i] = b ? in[i] + b[i] : in[i];
      mx = std::max(mx, out[i]);
    }
    // A row of -inf (everything masked) would give NaN, as in torch; Swin's -100 mask never does.
#pragma omp simd
    for (int64_t i = 0; i < L; ++i) out[i] = expf(out[i] - mx);
    LaneSum sum;
    sum.add(L, [out](int64_t i) { return static_cast<double>(out[i]); });
    const float inv = static_cast<float>(1.0 / sum.total());
    for (int64_t i = 0; i < L; ++i) out[i] *= inv;
  }
}

void softmax_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode dx_mode) {
  const int64_t L = y.size(-1), rows = y.numel() / L;
  const float *dyp = dy.data<float>(), *yp = y.data<float>();
  float* dxp = dx.data<float>();
  int nt = threads_for(ctx, y.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const float *g = dyp + r * L, *p = yp + r * L;
    LaneSum dot;
    dot.add(L, [g, p](int64_t i) { return static_cast<double>(g[i]) * p[i]; });
    const float d = static_cast<float>(dot.total());
    float* out = dxp + r * L;
    if (dx_mode == DxMode::overwrite)
      for (int64_t i = 0; i < L; ++i) out[i] = p[i] * (g[i] - d);
    else
      for (int64_t i = 0; i < L; ++i) out[i] += p[i] * (g[i] - d);
  }
}

}  // namespace dpx::cpu
