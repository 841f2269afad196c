// Reference AdamW step, torch.optim.AdamW's single-tensor path for one tensor. The scalars come
// from ops::adamw_scalars and each element follows torch's (and the CPU kernel's) f32 order.
#include <cmath>

#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

// param *= 1 - lr * wd                                  (decoupled weight decay)
// m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2        (first and second moments)
// param -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)   (bias-corrected step)
void adamw_step(Context&, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                const AdamwParams& p, int64_t step, const Tensor* scalars, const Tensor* skip) {
  if (skip && skip->data<int64_t>()[0] != 0) return;
  const ops::AdamwScalars s = scalars ? ops::adamw_scalars_of(*scalars) : ops::adamw_scalars(p, step);
  float* w = param.data<float>();
  const float* gp = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  for (int64_t i = 0; i < param.numel(); ++i) {
    const float g = gp[i];
    m[i] = s.beta1 * m[i] + s.one_minus_beta1 * g;
    v[i] = s.beta2 * v[i] + s.one_minus_beta2 * g * g;
    const float denom = std::sqrt(v[i]) / s.bias_correction2_sqrt + s.eps;
    w[i] = w[i] * s.decay - s.step_size * m[i] / denom;
  }
}

}  // namespace dpx::ref
