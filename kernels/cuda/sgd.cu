// Fused SGD step on CUDA (torch.optim.SGD semantics): weight decay, momentum with dampening,
// Nesterov, in one pass over a contiguous range (typically the whole flat parameter buffer).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

// `buf` is null when momentum is 0 (no buffer is kept then). `lr_at` and `skip` (ops.def: a step
// recorded into a CUDA graph reads them on the device) may be null: p.lr then, and no skip.
__global__ void sgd_kernel(float* param, const float* grad, float* buf, SgdParams p, bool first_step, int64_t n,
                           const float* lr_at, const long long* skip) {
  if (skip && *skip != 0) return;
  const float lr = lr_at ? *lr_at : p.lr;
  DPX_CUDA_LOOP(i, n) {
    float g = grad[i];
    if (p.weight_decay != 0.f) g += p.weight_decay * param[i];
    if (buf) {
      float b = first_step ? g : p.momentum * buf[i] + (1.f - p.dampening) * g;
      buf[i] = b;
      g = p.nesterov ? g + p.momentum * b : b;
    }
    param[i] -= lr * g;
  }
}

}  // namespace

void sgd_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p,
              bool first_step, const Tensor* scalars, const Tensor* skip) {
  CudaState& st = state_of(ctx);
  const char* op = "sgd_step";
  // The same rule (and wording) as torch.optim.SGD's constructor and the CPU op.
  float* buf = nullptr;
  if (p.momentum != 0.f) {
    buf = detail::f32(momentum_buf, op, "momentum_buf");
  }
  int64_t n = param.numel();
  if (n == 0) return;
  sgd_kernel<<<detail::grid_for(n), detail::kThreads, 0, st.stream>>>(
      detail::f32(param, op, "param"), detail::f32(grad, op, "grad"), buf, p, first_step, n,
      scalars ? detail::f32(*scalars, op, "scalars") : nullptr,
      skip ? static_cast<const long long*>(skip->raw()) : nullptr);
  check_launch();
}

}  // namespace dpx::cuda
