// SGD: torch.optim.SGD's argument checks, and a step as a few ops::sgd_step calls over
// runs of trainable parameters in the flat buffers.
#include "layers/optim.hpp"

namespace dpx::nn {

SGD::SGD(Model& model, const ops::SgdParams& params) : model_(&model), p_(params) {
  // The checks torch.optim.SGD makes, with its messages' meaning.
  if (p_.lr < 0.f) fail("SGD: invalid learning rate ", p_.lr, " (must be >= 0)");
  if (p_.momentum < 0.f) fail("SGD: invalid momentum ", p_.momentum, " (must be >= 0)");
  if (p_.weight_decay < 0.f) fail("SGD: invalid weight_decay ", p_.weight_decay, " (must be >= 0)");
  if (p_.nesterov && (p_.momentum <= 0.f || p_.dampening != 0.f))
    fail("SGD: Nesterov momentum requires a momentum > 0 and zero dampening");
  started_.assign(model.slots().size(), 0);
  if (p_.momentum != 0.f)
    momentum_ = Tensor::zeros({model.num_parameters()}, DType::f32, model.device());
}

void SGD::set_lr(float lr) {
  if (lr < 0.f) fail("SGD: invalid learning rate ", lr, " (must be >= 0)");
  p_.lr = lr;
}

void SGD::step(Context& ctx) {
  const auto& slots = model_->slots();
  DPX_CHECK(slots.size() == started_.size(), "SGD: the model's parameters changed after the optimizer was made");
  Tensor& params = model_->flat_params();
  Tensor& grads = model_->flat_grads();
  // Slots are contiguous in registration order, so a run of trainable slots in the same
  // first-step state is one range of all three buffers: one op instead of one per tensor.
  size_t i = 0;
  while (i < slots.size()) {
    if (!slots[i].param->requires_grad || slots[i].numel == 0) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < slots.size() && slots[j].param->requires_grad && started_[j] == started_[i]) ++j;
    int64_t begin = slots[i].offset, end = slots[j - 1].offset + slots[j - 1].numel;
    Tensor p = params.view_at(begin, {end - begin});
    Tensor g = grads.view_at(begin, {end - begin});
    Tensor m = momentum_.defined() ? momentum_.view_at(begin, {end - begin}) : Tensor();
    ops::sgd_step(ctx, p, g, m, p_, started_[i] == 0);
    for (size_t k = i; k < j; ++k) started_[k] = 1;
    i = j;
  }
  ++steps_;
}

}  // namespace dpx::nn
