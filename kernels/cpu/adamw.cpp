// CPU AdamW step, exactly torch.optim.AdamW's single-tensor path for one tensor: decoupled
// weight decay, both moments, bias correction. Elementwise, so a flat parameter buffer is one
// call, and each element's arithmetic is the same whatever the thread count.
#include <cmath>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

void adamw_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                const AdamwParams& p, int64_t step, const Tensor* scalars, const Tensor* skip) {
  if (skip && skip->data<int64_t>()[0] != 0) return;
  const ops::AdamwScalars s = scalars ? ops::adamw_scalars_of(*scalars) : ops::adamw_scalars(p, step);
  float* w = param.data<float>();
  const float* gp = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  const int64_t n = param.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) {
    // torch's order of operations: param.mul_(decay); exp_avg.mul_(b1).add_(g, alpha=1-b1);
    // exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2); denom = sqrt(v) / sqrt(bc2) + eps;
    // param.addcdiv_(exp_avg, denom, value=-step_size).
    const float g = gp[i];
    const float mi = s.beta1 * m[i] + s.one_minus_beta1 * g;
    const float vi = s.beta2 * v[i] + s.one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;
    w[i] = w[i] * s.decay - s.step_size * mi / denom;
  }
}

}  // namespace dpx::cpu
