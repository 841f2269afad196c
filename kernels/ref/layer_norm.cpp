// Reference layer normalisation over the last dimension (torch.nn.LayerNorm(D)), forward and
// backward: each row of x (rows, D) is normalised on its own.
#include <cmath>
#include <vector>

#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

// Per row r:  mean = sum x / D,  rstd = 1 / sqrt(sum (x - mean)^2 / D + eps),
//             y = (x - mean) * rstd * gamma + beta;  mean and rstd are saved for backward.
void layer_norm_forward(Context&, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                        const Tensor& gamma, const Tensor& beta, float eps) {
  const int64_t D = x.size(-1), rows = x.numel() / D;
  const float* xp = x.data<float>();
  const float* gp = gamma.data<float>();
  const float* bp = beta.data<float>();
  float* yp = y.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * D;
    double sum = 0;
    for (int64_t i = 0; i < D; ++i) sum += row[i];
    const double mu = sum / D;
    double sq = 0;
    for (int64_t i = 0; i < D; ++i) sq += (row[i] - mu) * (row[i] - mu);
    const double inv = 1.0 / std::sqrt(sq / D + eps);
    for (int64_t i = 0; i < D; ++i) yp[r * D + i] = static_cast<float>((row[i] - mu) * inv * gp[i] + bp[i]);
    mean.data<float>()[r] = static_cast<float>(mu);
    rstd.data<float>()[r] = static_cast<float>(inv);
  }
}

// With xhat = (x - mean) * rstd (the saved mean and rstd) and g = dy * gamma, per row:
//   dx (+)= rstd * (g - mean(g) - xhat * mean(g * xhat));
// and over all rows: dgamma += sum dy * xhat, dbeta += sum dy.
void layer_norm_backward(Context&, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                         const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                         DxMode dx_mode) {
  const int64_t D = x.size(-1), rows = x.numel() / D;
  const float* xp = x.data<float>();
  const float* dyp = dy.data<float>();
  const float* gp = gamma.data<float>();
  std::vector<double> dgamma_acc(static_cast<size_t>(D), 0.0), dbeta_acc(static_cast<size_t>(D), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double mu = mean.data<float>()[r], inv = rstd.data<float>()[r];
    double g_sum = 0, gx_sum = 0;  // sums over the row of g and of g * xhat
    for (int64_t i = 0; i < D; ++i) {
      const double xhat = (xp[r * D + i] - mu) * inv, dyi = dyp[r * D + i];
      dgamma_acc[i] += dyi * xhat;
      dbeta_acc[i] += dyi;
      g_sum += dyi * gp[i];
      gx_sum += dyi * gp[i] * xhat;
    }
    if (!dx) continue;
    float* dxp = dx->data<float>();
    for (int64_t i = 0; i < D; ++i) {
      const double xhat = (xp[r * D + i] - mu) * inv, g = static_cast<double>(dyp[r * D + i]) * gp[i];
      const auto v = static_cast<float>(inv * (g - g_sum / D - xhat * gx_sum / D));
      dxp[r * D + i] = dx_mode == DxMode::overwrite ? v : dxp[r * D + i] + v;
    }
  }
  for (int64_t i = 0; i < D; ++i) {
    if (dgamma) dgamma->data<float>()[i] += static_cast<float>(dgamma_acc[i]);
    if (dbeta) dbeta->data<float>()[i] += static_cast<float>(dbeta_acc[i]);
  }
}

}  // namespace dpx::ref
