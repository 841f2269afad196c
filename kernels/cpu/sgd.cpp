// CPU SGD step, exactly torch.optim.SGD for one tensor: weight decay, momentum with dampening,
// Nesterov. Elementwise, so a flat parameter buffer can be updated in one call.
#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

void sgd_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& momentum_buf,
              const SgdParams& p, bool first_step, const Tensor* scalars, const Tensor* skip) {
  if (skip && skip->data<int64_t>()[0] != 0) return;
  const bool use_momentum = p.momentum != 0.f;
  float* buf = use_momentum ? momentum_buf.data<float>() : nullptr;
  float* w = param.data<float>();
  const float* gp = grad.data<float>();
  const float lr = scalars ? scalars->data<float>()[0] : p.lr;
  const float wd = p.weight_decay, mom = p.momentum, damp = 1.f - p.dampening;
  const bool nesterov = p.nesterov;
  const int64_t n = param.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) {
    float g = gp[i];
    if (wd != 0.f) g += wd * w[i];
    if (use_momentum) {
      // torch keeps a clone of the first gradient, undamped.
      buf[i] = first_step ? g : mom * buf[i] + damp * g;
      g = nesterov ? g + mom * buf[i] : buf[i];
    }
    w[i] -= lr * g;
  }
}

}  // namespace dpx::cpu
