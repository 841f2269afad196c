// Fused AdamW step on CUDA (torch.optim.AdamW's single-tensor semantics): weight decay, both
// moments and the bias-corrected update in one pass over a contiguous range (typically the
// whole flat parameter buffer), with the per-step scalars computed once on the host.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

// `scalars` (ops.def: a step recorded into a CUDA graph reads them on the device) replaces `s`
// when not null; `skip`, when not null and not 0, skips the update.
__global__ void adamw_kernel(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                             ops::AdamwScalars s, int64_t n, const ops::AdamwScalars* scalars,
                             const long long* skip) {
  if (skip && *skip != 0) return;
  if (scalars) s = *scalars;
  DPX_CUDA_LOOP(i, n) {
    const float g = grad[i];
    const float m = s.beta1 * exp_avg[i] + s.one_minus_beta1 * g;
    const float v = s.beta2 * exp_avg_sq[i] + s.one_minus_beta2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
    param[i] = param[i] * s.decay - s.step_size * m / denom;
  }
}

}  // namespace

void adamw_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                const AdamwParams& p, int64_t step, const Tensor* scalars, const Tensor* skip) {
  CudaState& st = state_of(ctx);
  const char* op = "adamw_step";
  const ops::AdamwScalars s = scalars ? ops::AdamwScalars{} : ops::adamw_scalars(p, step);
  float* w = detail::f32(param, op, "param");
  const float* g = detail::f32(grad, op, "grad");
  float* m = detail::f32(exp_avg, op, "exp_avg");
  float* v = detail::f32(exp_avg_sq, op, "exp_avg_sq");
  int64_t n = param.numel();
  if (n == 0) return;
  const auto* on_device =
      scalars ? reinterpret_cast<const ops::AdamwScalars*>(detail::f32(*scalars, op, "scalars")) : nullptr;
  adamw_kernel<<<detail::grid_for(n), detail::kThreads, 0, st.stream>>>(
      w, g, m, v, s, n, on_device, skip ? static_cast<const long long*>(skip->raw()) : nullptr);
  check_launch();
}

}  // namespace dpx::cuda
