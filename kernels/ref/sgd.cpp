// Reference SGD step, torch.optim.SGD for one tensor: weight decay, momentum with dampening,
// Nesterov. Element by element in f32, in torch's order of operations.
#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

// g = grad + wd * param;
// with momentum: buf = first_step ? g : momentum * buf + (1 - dampening) * g,
//                g = nesterov ? g + momentum * buf : buf;
// param -= lr * g (lr: scalars[0] when given). momentum_buf is not touched when momentum is 0,
// nothing when skip is not 0.
void sgd_step(Context&, Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p,
              bool first_step, const Tensor* scalars, const Tensor* skip) {
  if (skip && skip->data<int64_t>()[0] != 0) return;
  const float lr = scalars ? scalars->data<float>()[0] : p.lr;
  float* w = param.data<float>();
  const float* gp = grad.data<float>();
  float* buf = p.momentum != 0.f ? momentum_buf.data<float>() : nullptr;
  for (int64_t i = 0; i < param.numel(); ++i) {
    float g = gp[i];
    if (p.weight_decay != 0.f) g += p.weight_decay * w[i];
    if (buf) {
      buf[i] = first_step ? g : p.momentum * buf[i] + (1.f - p.dampening) * g;
      g = p.nesterov ? g + p.momentum * buf[i] : buf[i];
    }
    w[i] -= lr * g;
  }
}

}  // namespace dpx::ref
