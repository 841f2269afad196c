// Model (see model.hpp): the flat parameter and gradient buffers every Parameter is a view of,
// cloning to a device, and the slots DDP's buckets and the optimizer work on.
#include "layers/model.hpp"

#include "kernels/ops.hpp"

namespace dpx::nn {

Model::Model(std::unique_ptr<Module> root, Device device, bool with_grads) : root_(std::move(root)), device_(device) {
  auto named = root_->named_parameters();
  int64_t total = 0;
  for (auto& [name, p] : named) {
    slots_.push_back({name, p, total, p->value.numel()});
    total += p->value.numel();
  }
  // The parameters move into the flat buffer one by one (each one's own storage freed as it
  // goes), and only then is the gradient buffer made: while a replica is cloned, its source, its
  // own copies and the flat buffer are alive, never a gradient buffer beside them (AlexNet: that
  // made the run's peak, 4 x its weights, above any step's).
  flat_params_ = Tensor::zeros({total}, DType::f32, device);
  for (auto& s : slots_) {
    Tensor view = flat_params_.view_at(s.offset, s.param->value.shape());
    view.copy_from(s.param->value);
    s.param->value = view;
  }
  if (with_grads) {
    flat_grads_ = Tensor::zeros({total}, DType::f32, device);
    for (auto& s : slots_) s.param->grad = flat_grads_.view_at(s.offset, s.param->value.shape());
  }
  root_->to(device);  // buffers (parameters are already there)
  root_->set_input_grad_needed(false);
}

int64_t Model::num_trainable() const {
  int64_t n = 0;
  for (auto& s : slots_)
    if (s.param->requires_grad) n += s.numel;
  return n;
}

void Model::zero_grad(Context& ctx) {
  if (flat_grads_.numel() > 0) ops::fill(ctx, flat_grads_, 0.f);
}

Model Model::clone(Device device) const {
  Model m(root_->clone(), device);
  return m;
}

void Model::copy_state_from(const Model& other) {
  DPX_CHECK(other.slots_.size() == slots_.size() && other.num_parameters() == num_parameters(),
            "copy_state_from: models differ in their parameters");
  flat_params_.copy_from(other.flat_params_);
  auto mine = root_->named_buffers();
  auto theirs = other.root_->named_buffers();
  DPX_CHECK(mine.size() == theirs.size(), "copy_state_from: models differ in their buffers");
  for (size_t i = 0; i < mine.size(); ++i) mine[i].second->copy_from(*theirs[i].second);
}

std::map<std::string, Tensor> Model::state_dict() {
  std::map<std::string, Tensor> out;
  for (auto& s : slots_) out[s.name] = s.param->value;
  for (auto& [name, t] : root_->named_buffers()) out[name] = *t;
  return out;
}

}  // namespace dpx::nn
