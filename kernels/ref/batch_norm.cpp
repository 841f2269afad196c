// Reference batch normalisation over (N, spatial) for each channel of x (N, C, ...): training
// forward (batch statistics, running statistics updated), eval forward, and backward; x may have
// more channels than y (Cx), of which the first C are normalised.
#include <cmath>
#include <vector>

#include "kernels/host_half.hpp"
#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

namespace {
// x viewed as (N, C, S): S elements per (n, c), the product of the dimensions after C.
struct BnSizes {
  int64_t N, C, Cx, S;
  int64_t at(int64_t n, int64_t c, int64_t s) const { return (n * C + c) * S + s; }     // in y, dy
  int64_t x_at(int64_t n, int64_t c, int64_t s) const { return (n * Cx + c) * S + s; }  // in x, dx
};
// y (or dy) (N, C, ...) against x (N, Cx, ...).
BnSizes sizes(const Tensor& y, const Tensor& x) {
  BnSizes b{x.size(0), y.size(1), x.size(1), 1};
  for (int d = 2; d < x.dim(); ++d) b.S *= x.size(d);
  return b;
}
// max(v, 0) for Epilogue::relu (NaN passes, as relu_forward), v * sigmoid(v) for Epilogue::silu
// (silu_forward's formula on the float v), else v.
float apply(Epilogue epilogue, double v) {
  const float f = static_cast<float>(v);
  if (epilogue == Epilogue::silu) return static_cast<float>(f / (1.0 + std::exp(-static_cast<double>(f))));
  return epilogue == Epilogue::relu && f < 0.f ? 0.f : f;
}

}  // namespace

// For each channel c, over its M = N * S values:
//   mean = sum x / M,  var = sum (x - mean)^2 / M (biased),  invstd = 1 / sqrt(var + eps),
//   y = (x - mean) * invstd * gamma + beta;
//   running_mean = (1 - momentum) running_mean + momentum mean,
//   running_var  = (1 - momentum) running_var  + momentum var * M / (M - 1) (unbiased).
void batch_norm_forward_train(Context& ctx, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                              Tensor& running_mean, Tensor& running_var, const Tensor& x,
                              const Tensor& gamma, const Tensor& beta, float momentum, float eps,
                              Tensor* batches_tracked, Epilogue epilogue) {
  if (kernels::is_half(x) || kernels::is_half(y))
    return kernels::batch_norm_forward_train_widened(batch_norm_forward_train, ctx, y, save_mean, save_invstd,
                                                     running_mean, running_var, x, gamma, beta, momentum, eps,
                                                     batches_tracked, epilogue);
  if (batches_tracked) ++batches_tracked->data<int64_t>()[0];
  const BnSizes b = sizes(y, x);
  const int64_t M = b.N * b.S;
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  const float* bp = beta.data<float>();
  float* yp = y.data<float>();
  for (int64_t c = 0; c < b.C; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < b.N; ++n)
      for (int64_t s = 0; s < b.S; ++s) sum += xp[b.x_at(n, c, s)];
    const double mean = sum / M;
    double sq = 0;
    for (int64_t n = 0; n < b.N; ++n)
      for (int64_t s = 0; s < b.S; ++s) sq += (xp[b.x_at(n, c, s)] - mean) * (xp[b.x_at(n, c, s)] - mean);
    const double var = sq / M;
    const double invstd = 1.0 / std::sqrt(var + eps);
    for (int64_t n = 0; n < b.N; ++n)
      for (int64_t s = 0; s < b.S; ++s) {
        yp[b.at(n, c, s)] = apply(epilogue, (xp[b.x_at(n, c, s)] - mean) * invstd * gp[c] + bp[c]);
      }
    save_mean.data<float>()[c] = static_cast<float>(mean);
    save_invstd.data<float>()[c] = static_cast<float>(invstd);
    float& rm = running_mean.data<float>()[c];
    float& rv = running_var.data<float>()[c];
    rm = static_cast<float>((1.0 - momentum) * rm + momentum * mean);
    rv = static_cast<float>((1.0 - momentum) * rv + momentum * var * M / (M - 1));
  }
}

// y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta (then the epilogue)
void batch_norm_forward_eval(Context& ctx, Tensor& y, const Tensor& x, const Tensor& gamma,
                             const Tensor& beta, const Tensor& running_mean,
                             const Tensor& running_var, float eps, Epilogue epilogue) {
  if (kernels::is_half(x) || kernels::is_half(y))
    return kernels::batch_norm_forward_eval_widened(batch_norm_forward_eval, ctx, y, x, gamma, beta, running_mean,
                                                    running_var, eps, epilogue);
  const BnSizes b = sizes(y, x);
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  const float* bp = beta.data<float>();
  const float* rm = running_mean.data<float>();
  const float* rv = running_var.data<float>();
  float* yp = y.data<float>();
  for (int64_t n = 0; n < b.N; ++n)
    for (int64_t c = 0; c < b.C; ++c) {
      const double invstd = 1.0 / std::sqrt(static_cast<double>(rv[c]) + eps);
      for (int64_t s = 0; s < b.S; ++s) {
        yp[b.at(n, c, s)] = apply(epilogue, (xp[b.x_at(n, c, s)] - rm[c]) * invstd * gp[c] + bp[c]);
      }
    }
}

// With xhat = (x - mean) * invstd, per channel over its M values:
//   dbeta += sum dy,  dgamma += sum dy * xhat,
//   dx += gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)),
// dy first passed back through the activation the forward applied (relu_out or silu_beta).
void batch_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                         const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                         const Tensor& save_invstd, DxMode dx_mode, const Tensor* relu_out,
                         const Tensor* silu_beta) {
  if (kernels::is_half(x) || kernels::is_half(dy) || kernels::is_half(relu_out))
    return kernels::batch_norm_backward_widened(batch_norm_backward, ctx, dx, dgamma, dbeta, dy, x, gamma, save_mean,
                                                save_invstd, dx_mode, relu_out, silu_beta);
  const BnSizes b = sizes(dy, x);
  const int64_t M = b.N * b.S;
  if (M == 0) return;
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  std::vector<float> through;  // dy through the activation
  const float* dyp = dy.data<float>();
  if (relu_out) {  // dy counts only where the ReLU's output is > 0, as relu_backward's mask
    through.assign(dyp, dyp + dy.numel());
    for (int64_t i = 0; i < dy.numel(); ++i)
      if (!(relu_out->data<float>()[i] > 0.f)) through[i] = 0.f;
    dyp = through.data();
  }
  if (silu_beta) {  // dy * silu'(y), y recomputed from the saved (float) statistics: the forward's
                    // y to rounding, as the forward used its statistics in double
    through.assign(dyp, dyp + dy.numel());
    for (int64_t c = 0; c < b.C; ++c) {
      const double mean = save_mean.data<float>()[c], invstd = save_invstd.data<float>()[c];
      for (int64_t n = 0; n < b.N; ++n)
        for (int64_t s = 0; s < b.S; ++s) {
          const double v = apply(Epilogue::none, (xp[b.x_at(n, c, s)] - mean) * invstd * gp[c] +
                                                     silu_beta->data<float>()[c]);
          const double sig = 1.0 / (1.0 + std::exp(-v));
          float& g = through[b.at(n, c, s)];
          g = static_cast<float>(g * sig * (1.0 + v * (1.0 - sig)));
        }
    }
    dyp = through.data();
  }
  for (int64_t c = 0; c < b.C; ++c) {
    const double mean = save_mean.data<float>()[c], invstd = save_invstd.data<float>()[c];
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t n = 0; n < b.N; ++n)
      for (int64_t s = 0; s < b.S; ++s) {
        const int64_t i = b.at(n, c, s);
        sum_dy += dyp[i];
        sum_dy_xhat += dyp[i] * (xp[b.x_at(n, c, s)] - mean) * invstd;
      }
    if (dbeta) dbeta->data<float>()[c] += static_cast<float>(sum_dy);
    if (dgamma) dgamma->data<float>()[c] += static_cast<float>(sum_dy_xhat);
    if (!dx) continue;
    float* dxp = dx->data<float>();
    for (int64_t n = 0; n < b.N; ++n)
      for (int64_t s = 0; s < b.S; ++s) {
        const int64_t i = b.at(n, c, s), xi = b.x_at(n, c, s);
        const double xhat = (xp[xi] - mean) * invstd;
        const auto g = static_cast<float>(gp[c] * invstd * (dyp[i] - sum_dy / M - xhat * sum_dy_xhat / M));
        dxp[xi] = dx_mode == DxMode::overwrite ? g : dxp[xi] + g;
      }
  }
}

}  // namespace dpx::ref
