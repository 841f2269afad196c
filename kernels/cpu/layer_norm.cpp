// CPU layer normalisation over the last dimension (torch.nn.LayerNorm), forward and backward.
// Rows are independent; dgamma/dbeta are summed per fixed chunk of rows (chunks depend only on
// the shape) and the chunks then added in order, in double, so no result depends on threads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

struct LnShape {
  int64_t rows, D;
};

LnShape ln_shape(const Tensor& x) { return {x.numel() / x.size(-1), x.size(-1)}; }

}  // namespace

void layer_norm_forward(Context& ctx, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                        const Tensor& gamma, const Tensor& beta, float eps) {
  const LnShape s = ln_shape(x);
  const float *xp = x.data<float>(), *gp = gamma.data<float>(), *bp = beta.data<float>();
  float *yp = y.data<float>(), *mp = mean.data<float>(), *rp = rstd.data<float>();
  int nt = threads_for(ctx, x.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* in = xp + r * s.D;
    float* out = yp + r * s.D;
    LaneSum sum, sq;  // two passes: no cancellation as in E[x^2] - E[x]^2
    sum.add(s.D, [in](int64_t i) { return static_cast<double>(in[i]); });
    const double mu = sum.total() / s.D;
    sq.add(s.D, [in, mu](int64_t i) { return (in[i] - mu) * (in[i] - mu); });
    const float m = static_cast<float>(mu);
    const float inv = static_cast<float>(1.0 / std::sqrt(sq.total() / s.D + eps));
    mp[r] = m;
    rp[r] = inv;
    for (int64_t i = 0; i < s.D; ++i) out[i] = (in[i] - m) * inv * gp[i] + bp[i];
  }
}

void layer_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                         const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                         DxMode dx_mode) {
  const LnShape s = ln_shape(x);
  const bool params = dgamma || dbeta;
  // At most 64 chunks, so the partial sums stay small, and at least 16 rows per chunk.
  const int64_t chunk_rows = std::max<int64_t>(16, (s.rows + 63) / 64);
  const int64_t chunks = (s.rows + chunk_rows - 1) / chunk_rows;
  Scratch<double> partial(params ? chunks * 2 * s.D : 0, /*zero=*/true);
  const float *xp = x.data<float>(), *dyp = dy.data<float>(), *gp = gamma.data<float>();
  const float *mp = mean.data<float>(), *rp = rstd.data<float>();
  float* dxp = dx ? dx->data<float>() : nullptr;
  int nt = threads_for(ctx, x.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    double* pg = params ? partial.data() + c * 2 * s.D : nullptr;  // dgamma, then dbeta
    const int64_t r1 = std::min(s.rows, (c + 1) * chunk_rows);
    for (int64_t r = c * chunk_rows; r < r1; ++r) {
      const float *in = xp + r * s.D, *g = dyp + r * s.D;
      const float m = mp[r], inv = rp[r];
      if (pg)
        for (int64_t i = 0; i < s.D; ++i) {
          pg[i] += static_cast<double>(g[i]) * ((in[i] - m) * inv);
          pg[s.D + i] += g[i];
        }
      if (!dxp) continue;
      LaneSum gsum, gxsum;  // sums of dy * gamma and of dy * gamma * xhat
      gsum.add(s.D, [g, gp](int64_t i) { return static_cast<double>(g[i]) * gp[i]; });
      gxsum.add(s.D, [g, gp, in, m, inv](int64_t i) {
        return static_cast<double>(g[i]) * gp[i] * ((in[i] - m) * inv);
      });
      const float a = static_cast<float>(gsum.total() / s.D), b = static_cast<float>(gxsum.total() / s.D);
      float* out = dxp + r * s.D;
      if (dx_mode == DxMode::overwrite)
        for (int64_t i = 0; i < s.D; ++i) out[i] = inv * (g[i] * gp[i] - a - (in[i] - m) * inv * b);
      else
        for (int64_t i = 0; i < s.D; ++i) out[i] += inv * (g[i] * gp[i] - a - (in[i] - m) * inv * b);
    }
  }
  if (!params) return;
  float* dgp = dgamma ? dgamma->data<float>() : nullptr;
  float* dbp = dbeta ? dbeta->data<float>() : nullptr;
  for (int64_t i = 0; i < s.D; ++i) {
    double sg = 0, sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += partial[c * 2 * s.D + i];
      sb += partial[c * 2 * s.D + s.D + i];
    }
    if (dgp) dgp[i] += static_cast<float>(sg);
    if (dbp) dbp[i] += static_cast<float>(sb);
  }
}

}  // namespace dpx::cpu
