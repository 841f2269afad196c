// Fused SGD step on CUDA (torch.optim.SGD semantics): weight decay, momentum with dampening,
// Nesterov, in one pass over a contiguous range (typically the whole flat parameter buffer).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

// `buf` is null when momentum is 0 (no buffer is kept then).
__global__ void sgd_kernel(float* param, const float* grad, float* buf, SgdParams p, bool first_step, int64_t n) {
  DPX_CUDA_LOOP(i, n) {
    float g = grad[i];
    if (p.weight_decay != 0.f) g += p.weight_decay * param[i];
    if (buf) {
      float b = first_step ? g : p.momentum * buf[i] + (1.f - p.dampening) * g;
      buf[i] = b;
      g = p.nesterov ? g + p.momentum * b : b;
    }
    param[i] -= p.lr * g;
  }
}

}  // namespace

void sgd_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p,
              bool first_step) {
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
      detail::f32(param, op, "param"), detail::f32(grad, op, "grad"), buf, p, first_step, n);
  check_launch();
}

}  // namespace dpx::cuda
