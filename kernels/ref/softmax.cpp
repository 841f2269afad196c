// Reference softmax over the last dimension, with an optional bias added at every leading
// index (attention scores plus a position bias), and its backward.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

// x (rows, L); bias (bias_rows, L) where bias_rows divides rows: row r of x gets bias row
// r % bias_rows (the bias has the shape of x's trailing dimensions). Per row, with z = x + bias:
//   y_i = exp(z_i - max z) / sum_j exp(z_j - max z)   (subtracting the max avoids overflow).
void softmax_forward(Context&, Tensor& y, const Tensor& x, const Tensor* bias) {
  const int64_t L = x.size(-1), rows = x.numel() / L;
  const float* bp = bias && bias->defined() ? bias->data<float>() : nullptr;
  const int64_t bias_rows = bp ? bias->numel() / L : 1;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  std::vector<double> z(static_cast<size_t>(L));
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < L; ++i) {
      // The sum is rounded to f32 first, as the kernels store x + bias in f32.
      z[i] = bp ? xp[r * L + i] + bp[(r % bias_rows) * L + i] : xp[r * L + i];
      mx = std::max(mx, z[i]);
    }
    double sum = 0;
    for (int64_t i = 0; i < L; ++i) sum += std::exp(z[i] - mx);
    for (int64_t i = 0; i < L; ++i) yp[r * L + i] = static_cast<float>(std::exp(z[i] - mx) / sum);
  }
}

// dx_i (+)= y_i * (dy_i - sum_j dy_j y_j) along each row (the softmax Jacobian times dy).
void softmax_backward(Context&, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode dx_mode) {
  const int64_t L = y.size(-1), rows = y.numel() / L;
  const float* dyp = dy.data<float>();
  const float* yp = y.data<float>();
  float* dxp = dx.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (int64_t i = 0; i < L; ++i) dot += static_cast<double>(dyp[r * L + i]) * yp[r * L + i];
    for (int64_t i = 0; i < L; ++i) {
      const auto v = static_cast<float>(yp[r * L + i] * (dyp[r * L + i] - dot));
      dxp[r * L + i] = dx_mode == DxMode::overwrite ? v : dxp[r * L + i] + v;
    }
  }
}

}  // namespace dpx::ref
