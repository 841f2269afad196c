// CPU batch normalisation over (N, spatial) for each channel of x (N, C, ...): training forward
// (batch statistics; running stats with the unbiased variance, as PyTorch), eval forward, and
// backward; x may have more channels than y, of which the first C are normalised. A ReLU or SiLU
// after it can be folded into the forward (ops::Epilogue) and into the backward (relu_out,
// silu_beta). Channels are independent, and each one is summed in a fixed order, in double
// (detail::LaneSum).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "kernels/host_half.hpp"
#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/libmvec.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

struct BnShape {
  int64_t N, C, Cx, S;  // C: y's channels (x's first C); Cx: x's; S: elements per (n, c), 1 for (N, C)
  int64_t y_at(int64_t n, int64_t c) const { return (n * C + c) * S; }
  int64_t x_at(int64_t n, int64_t c) const { return (n * Cx + c) * S; }
};

// y (or dy) (N, C, ...) against x (N, Cx, ...).
BnShape bn_shape(const Tensor& y, const Tensor& x) {
  BnShape s{x.size(0), y.size(1), x.size(1), 1};
  for (int d = 2; d < x.dim(); ++d) s.S *= x.size(d);
  return s;
}

// Rows (M, C): x is (M, C) with S = 1 and no wider buffer (BatchNorm1d, and a channels-last map
// (N*H*W, C) under --memory-format channels_last). A channel is then every C-th float; the kernels
// below walk the rows once for kChannelBlock neighbouring channels at a time instead of once per
// channel, with the sums of the per-channel path (one running double per channel, rows in order:
// LaneSum's lane 0 for rows of one element), so the two paths give the same bits.
constexpr int64_t kChannelBlock = 16;
bool rows_layout(const BnShape& s) { return s.S == 1 && s.C == s.Cx; }

// out = in * a + b over n values, then the epilogue: max(., 0) for Epilogue::relu (NaN passes, as
// relu_forward), silu_of for Epilogue::silu.
void affine(float* out, const float* in, int64_t n, float a, float b, Epilogue epilogue) {
  if (epilogue == Epilogue::relu) {
    for (int64_t i = 0; i < n; ++i) out[i] = relu_of(in[i] * a + b);
  } else if (epilogue == Epilogue::silu) {
    by_lanes(n, [&](int64_t i) { return in[i] * a + b; }, Silu{}, [&](int64_t i, float r) { out[i] = r; });
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] * a + b;
  }
}

// p[i] = silu(p[i]) for i < n.
void silu_in_place(float* p, int64_t n) {
  by_lanes(n, [&](int64_t i) { return p[i]; }, Silu{}, [&](int64_t i, float r) { p[i] = r; });
}

// The forward's y = x * a + b of a channel with mean m, 1/sqrt(var + eps) invstd, gamma g, beta b.
// Training takes m and invstd as saved (floats), so that a backward, which has only those,
// recomputes y bit for bit (batch_norm_backward's silu_beta).
struct AffineCoef {
  float a, b;
};
AffineCoef affine_coef(double m, double invstd, double g, double b) {
  return {static_cast<float>(g * invstd), static_cast<float>(b - m * g * invstd)};
}

}  // namespace

void batch_norm_forward_train(Context& ctx, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                              Tensor& running_mean, Tensor& running_var, const Tensor& x,
                              const Tensor& gamma, const Tensor& beta, float momentum, float eps,
                              Tensor* batches_tracked, Epilogue epilogue) {
  if (kernels::is_half(x) || kernels::is_half(y))
    return kernels::batch_norm_forward_train_widened(batch_norm_forward_train, ctx, y, save_mean, save_invstd,
                                                     running_mean, running_var, x, gamma, beta, momentum, eps,
                                                     batches_tracked, epilogue);
  if (batches_tracked) ++batches_tracked->data<int64_t>()[0];
  const BnShape s = bn_shape(y, x);
  const int64_t M = s.N * s.S;  // values per channel (> 1: checked by the op layer)
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  float *mean_p = save_mean.data<float>(), *invstd_p = save_invstd.data<float>();
  float *rm = running_mean.data<float>(), *rv = running_var.data<float>();
  const float *gp = gamma.data<float>(), *bp = beta.data<float>();
  int nt = threads_for(ctx, x.numel());
  if (rows_layout(s)) {
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t c0 = 0; c0 < s.C; c0 += kChannelBlock) {
      const int64_t c1 = std::min(s.C, c0 + kChannelBlock);
      double mean[kChannelBlock] = {}, sq[kChannelBlock] = {};
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = c0; c < c1; ++c) mean[c - c0] += xp[r * s.C + c];
      for (int64_t c = c0; c < c1; ++c) mean[c - c0] /= M;
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const double d = xp[r * s.C + c] - mean[c - c0];
          sq[c - c0] += d * d;
        }
      float a[kChannelBlock], b[kChannelBlock];
      for (int64_t c = c0; c < c1; ++c) {
        const double var = sq[c - c0] / M, invstd = 1.0 / std::sqrt(var + eps), m = mean[c - c0];
        mean_p[c] = static_cast<float>(m);
        invstd_p[c] = static_cast<float>(invstd);
        rm[c] = static_cast<float>((1.0 - momentum) * rm[c] + momentum * m);
        rv[c] = static_cast<float>((1.0 - momentum) * rv[c] + momentum * var * M / (M - 1));
        const AffineCoef k = affine_coef(mean_p[c], invstd_p[c], gp[c], bp[c]);
        a[c - c0] = k.a;
        b[c - c0] = k.b;
      }
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const float v = xp[r * s.C + c] * a[c - c0] + b[c - c0];
          yp[r * s.C + c] = epilogue == Epilogue::relu ? relu_of(v) : v;
        }
        if (epilogue == Epilogue::silu) silu_in_place(yp + r * s.C + c0, c1 - c0);
      }
    }
    return;
  }
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t c = 0; c < s.C; ++c) {
    const double mean = channel_sum(xp, s.N, s.Cx, s.S, c) / M;
    // Two passes: the squared deviations do not cancel the way E[x^2] - E[x]^2 does.
    LaneSum sq;
    for (int64_t n = 0; n < s.N; ++n) {
      const float* in = xp + s.x_at(n, c);
      sq.add(s.S, [in, mean](int64_t i) { return (in[i] - mean) * (in[i] - mean); });
    }
    const double var = sq.total() / M;
    const double invstd = 1.0 / std::sqrt(var + eps);
    mean_p[c] = static_cast<float>(mean);
    invstd_p[c] = static_cast<float>(invstd);
    rm[c] = static_cast<float>((1.0 - momentum) * rm[c] + momentum * mean);
    rv[c] = static_cast<float>((1.0 - momentum) * rv[c] + momentum * var * M / (M - 1));
    // y = (x - mean) * invstd * gamma + beta = x * a + b
    const AffineCoef k = affine_coef(mean_p[c], invstd_p[c], gp[c], bp[c]);
    for (int64_t n = 0; n < s.N; ++n)
      affine(yp + s.y_at(n, c), xp + s.x_at(n, c), s.S, k.a, k.b, epilogue);
  }
}

void batch_norm_forward_eval(Context& ctx, Tensor& y, const Tensor& x, const Tensor& gamma,
                             const Tensor& beta, const Tensor& running_mean,
                             const Tensor& running_var, float eps, Epilogue epilogue) {
  if (kernels::is_half(x) || kernels::is_half(y))
    return kernels::batch_norm_forward_eval_widened(batch_norm_forward_eval, ctx, y, x, gamma, beta, running_mean,
                                                    running_var, eps, epilogue);
  const BnShape s = bn_shape(y, x);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const float *gp = gamma.data<float>(), *bp = beta.data<float>();
  const float *rm = running_mean.data<float>(), *rv = running_var.data<float>();
  auto coef = [&](int64_t c) {
    return affine_coef(rm[c], 1.0 / std::sqrt(static_cast<double>(rv[c]) + eps), gp[c], bp[c]);
  };
  const int nt = threads_for(ctx, x.numel());
  if (rows_layout(s)) {  // a row at a time, with the channels' coefficients computed once
    const Scratch<AffineCoef> k(s.C);
    for (int64_t c = 0; c < s.C; ++c) k[c] = coef(c);
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t r = 0; r < s.N; ++r) {
      const float* in = xp + r * s.C;
      float* out = yp + r * s.C;
      for (int64_t c = 0; c < s.C; ++c) {
        const float v = in[c] * k[c].a + k[c].b;
        out[c] = epilogue == Epilogue::relu ? relu_of(v) : v;
      }
      if (epilogue == Epilogue::silu) silu_in_place(out, s.C);
    }
    return;
  }
  const int64_t planes = s.N * s.C;
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const int64_t n = pl / s.C, c = pl % s.C;
    const AffineCoef k = coef(c);
    affine(yp + s.y_at(n, c), xp + s.x_at(n, c), s.S, k.a, k.b, epilogue);
  }
}

namespace {
// g[i], or +0 where a ReLU's output r[i] is not > 0 (relu_backward's rule). The choice is an
// AND with an all-ones or all-zeros mask, which vectorises inside LaneSum where a select did not
// (the masked backward ran 2.4x slower than relu_backward + the plain one).
template <bool kMasked>
inline float masked(const float* g, const float* r, int64_t i) {
  if constexpr (kMasked) {
    const uint32_t keep = 0u - static_cast<uint32_t>(r[i] > 0.f);
    return std::bit_cast<float>(std::bit_cast<uint32_t>(g[i]) & keep);
  }
  return g[i];
}

// batch_norm_backward for one channel c, its dy of image n at g0 + n * stride; with kMasked, dy
// counts only where relu_out (r0, the same offsets) is > 0 (a ReLU's backward folded in: NaN
// outputs mask too, as relu_backward's test y > 0).
template <bool kMasked>
void backward_channel(int64_t c, const BnShape& s, float* dxp, float* dgp, float* dbp, const float* g0,
                      const float* r0, int64_t stride, const float* xp, const float* gp, double mean, double invstd,
                      DxMode dx_mode) {
  const int64_t M = s.N * s.S;
  LaneSum dy_sum, dy_xc_sum;  // sum(dy), sum(dy * (x - mean))
  for (int64_t n = 0; n < s.N; ++n) {
    const float *in = xp + s.x_at(n, c), *g = g0 + n * stride, *r = kMasked ? r0 + n * stride : nullptr;
    dy_sum.add(s.S, [g, r](int64_t i) { return static_cast<double>(masked<kMasked>(g, r, i)); });
    dy_xc_sum.add(s.S,
                  [g, r, in, mean](int64_t i) { return masked<kMasked>(g, r, i) * (in[i] - mean); });
  }
  const double sum_dy = dy_sum.total(), sum_dy_xhat = dy_xc_sum.total() * invstd;
  if (dbp) dbp[c] += static_cast<float>(sum_dy);
  if (dgp) dgp[c] += static_cast<float>(sum_dy_xhat);
  if (!dxp) return;
  // dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), xhat = (x - mean) * invstd
  const float k = static_cast<float>(gp[c] * invstd);
  const float mean_dy = static_cast<float>(sum_dy / M);
  const float xhat_scale = static_cast<float>(invstd * sum_dy_xhat / M);
  const float mean_f = static_cast<float>(mean);
  for (int64_t n = 0; n < s.N; ++n) {
    const float *in = xp + s.x_at(n, c), *g = g0 + n * stride, *r = kMasked ? r0 + n * stride : nullptr;
    float* d = dxp + s.x_at(n, c);
    auto value = [&](int64_t i) {
      return k * (masked<kMasked>(g, r, i) - mean_dy - (in[i] - mean_f) * xhat_scale);
    };
    if (dx_mode == DxMode::overwrite)
      for (int64_t i = 0; i < s.S; ++i) d[i] = value(i);
    else
      for (int64_t i = 0; i < s.S; ++i) d[i] += value(i);
  }
}

// Channel c's dy * silu'(y) into out (image n's S values at out + n * S), y recomputed as the
// forward wrote it before the SiLU: x * k.a + k.b. One exp an element, as silu_backward: the
// channel's y first, then the SiLU's derivative over all of it (one partial chunk a channel, not
// one a plane: 7x7 planes would take 64 exps for 49 values), then times dy.
void silu_through(float* out, int64_t c, const BnShape& s, const float* dyp, const float* xp, AffineCoef k) {
  for (int64_t n = 0; n < s.N; ++n) {
    const float* in = xp + s.x_at(n, c);
    float* o = out + n * s.S;
    for (int64_t i = 0; i < s.S; ++i) o[i] = in[i] * k.a + k.b;
  }
  by_lanes(s.N * s.S, [&](int64_t i) { return out[i]; }, SiluGrad{}, [&](int64_t i, float r) { out[i] = r; });
  for (int64_t n = 0; n < s.N; ++n) {
    const float* d = dyp + s.y_at(n, c);
    float* o = out + n * s.S;
    for (int64_t i = 0; i < s.S; ++i) o[i] = d[i] * o[i];
  }
}

// What dy passes through before the batch norm's own backward (batch_norm_backward's relu_out
// and silu_beta).
enum class Through { plain, relu, silu };

// backward_channel's arithmetic for channels [c0, c1) of rows (M, C), the rows walked together;
// dy through the activation as kThrough says (for the SiLU, y recomputed in both walks: there is
// no room for a block's products).
template <Through kThrough>
void backward_rows(int64_t c0, int64_t c1, const BnShape& s, float* dxp, float* dgp, float* dbp, const float* dyp,
                   const float* rp, const float* bp, const float* xp, const float* gp, const float* mean_p,
                   const float* invstd_p, DxMode dx_mode) {
  const int64_t M = s.N, C = s.C;
  AffineCoef y_of[kChannelBlock] = {};  // the SiLU's input, x * a + b
  if constexpr (kThrough == Through::silu)
    for (int64_t c = c0; c < c1; ++c) y_of[c - c0] = affine_coef(mean_p[c], invstd_p[c], gp[c], bp[c]);
  // Row r's dy of channels [c0, c1), through the activation, into g.
  auto row_grads = [&](int64_t r, float* g) {
    const float* d = dyp + r * C;
    if constexpr (kThrough == Through::silu) {
      const float* in = xp + r * C + c0;
      by_lanes(c1 - c0, [&](int64_t j) { return in[j] * y_of[j].a + y_of[j].b; }, SiluGrad{},
               [&](int64_t j, float v) { g[j] = d[c0 + j] * v; });
    } else {
      constexpr bool kMasked = kThrough == Through::relu;
      for (int64_t c = c0; c < c1; ++c) g[c - c0] = masked<kMasked>(d, kMasked ? rp + r * C : nullptr, c);
    }
  };
  float g[kChannelBlock];
  double sum_dy[kChannelBlock] = {}, sum_dy_xc[kChannelBlock] = {};
  for (int64_t r = 0; r < M; ++r) {
    row_grads(r, g);
    for (int64_t c = c0; c < c1; ++c) {
      sum_dy[c - c0] += static_cast<double>(g[c - c0]);
      sum_dy_xc[c - c0] += g[c - c0] * (xp[r * C + c] - static_cast<double>(mean_p[c]));
    }
  }
  float k[kChannelBlock], mean_dy[kChannelBlock], xhat_scale[kChannelBlock], mean_f[kChannelBlock];
  for (int64_t c = c0; c < c1; ++c) {
    const double invstd = invstd_p[c], sum_dy_xhat = sum_dy_xc[c - c0] * invstd;
    if (dbp) dbp[c] += static_cast<float>(sum_dy[c - c0]);
    if (dgp) dgp[c] += static_cast<float>(sum_dy_xhat);
    k[c - c0] = static_cast<float>(gp[c] * invstd);
    mean_dy[c - c0] = static_cast<float>(sum_dy[c - c0] / M);
    xhat_scale[c - c0] = static_cast<float>(invstd * sum_dy_xhat / M);
    mean_f[c - c0] = static_cast<float>(static_cast<double>(mean_p[c]));
  }
  if (!dxp) return;
  for (int64_t r = 0; r < M; ++r) {
    row_grads(r, g);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j = c - c0;
      const float v = k[j] * (g[j] - mean_dy[j] - (xp[r * C + c] - mean_f[j]) * xhat_scale[j]);
      dxp[r * C + c] = dx_mode == DxMode::overwrite ? v : dxp[r * C + c] + v;
    }
  }
}
}  // namespace

void batch_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                         const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                         const Tensor& save_invstd, DxMode dx_mode, const Tensor* relu_out,
                         const Tensor* silu_beta) {
  if (kernels::is_half(x) || kernels::is_half(dy) || kernels::is_half(relu_out))
    return kernels::batch_norm_backward_widened(batch_norm_backward, ctx, dx, dgamma, dbeta, dy, x, gamma, save_mean,
                                                save_invstd, dx_mode, relu_out, silu_beta);
  const BnShape s = bn_shape(dy, x);
  if (s.N * s.S == 0) return;
  const float *xp = x.data<float>(), *dyp = dy.data<float>(), *gp = gamma.data<float>();
  const float* rp = relu_out ? relu_out->data<float>() : nullptr;
  const float* bp = silu_beta ? silu_beta->data<float>() : nullptr;
  const float *mean_p = save_mean.data<float>(), *invstd_p = save_invstd.data<float>();
  float* dxp = dx ? dx->data<float>() : nullptr;
  float* dgp = dgamma ? dgamma->data<float>() : nullptr;
  float* dbp = dbeta ? dbeta->data<float>() : nullptr;
  const int nt = threads_for(ctx, x.numel());
  if (rows_layout(s)) {
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t c0 = 0; c0 < s.C; c0 += kChannelBlock) {
      const int64_t c1 = std::min(s.C, c0 + kChannelBlock);
      if (rp)
        backward_rows<Through::relu>(c0, c1, s, dxp, dgp, dbp, dyp, rp, bp, xp, gp, mean_p, invstd_p, dx_mode);
      else if (bp)
        backward_rows<Through::silu>(c0, c1, s, dxp, dgp, dbp, dyp, rp, bp, xp, gp, mean_p, invstd_p, dx_mode);
      else
        backward_rows<Through::plain>(c0, c1, s, dxp, dgp, dbp, dyp, rp, bp, xp, gp, mean_p, invstd_p, dx_mode);
    }
    return;
  }
  // Under a SiLU each thread first writes its channel's dy * silu'(y) into a scratch row of M
  // values and reads dy from there: M floats a thread (3.2 MB at batch 64 on 112x112 maps).
  const int64_t M = s.N * s.S;
  const Scratch<float> through(bp ? nt * M : 0);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t c = 0; c < s.C; ++c) {
    const double mean = mean_p[c], invstd = invstd_p[c];
    const int64_t dy_at = s.y_at(0, c), dy_stride = s.C * s.S;
    if (rp) {
      backward_channel<true>(c, s, dxp, dgp, dbp, dyp + dy_at, rp + dy_at, dy_stride, xp, gp, mean, invstd, dx_mode);
    } else if (bp) {
      float* g = through.data() + omp_get_thread_num() * M;
      silu_through(g, c, s, dyp, xp, affine_coef(mean, invstd, gp[c], bp[c]));
      backward_channel<false>(c, s, dxp, dgp, dbp, g, nullptr, s.S, xp, gp, mean, invstd, dx_mode);
    } else {
      backward_channel<false>(c, s, dxp, dgp, dbp, dyp + dy_at, nullptr, dy_stride, xp, gp, mean, invstd, dx_mode);
    }
  }
}

}  // namespace dpx::cpu
