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
  Model m(root_->clone(), device);  // the modules' formats come with their copies
  m.format_ = format_;
  return m;
}

void Model::set_memory_format(ops::MemoryFormat format) {
  const bool on = format == ops::MemoryFormat::channels_last;
  std::vector<std::string> refused;
  std::vector<Module*> done;
  for (auto& [name, m] : root_->named_modules()) {
    if (m->set_channels_last(on))
      done.push_back(m);
    else
      refused.push_back(detail::concat(name.empty() ? "the model" : name, " (", m->type_name(), ")"));
  }
  if (!refused.empty()) {
    for (Module* m : done) m->set_channels_last(format_ == ops::MemoryFormat::channels_last);
    std::string list;
    for (size_t i = 0; i < refused.size() && i < 3; ++i) list += (i ? ", " : "") + refused[i];
    if (refused.size() > 3) list += detail::concat(" and ", refused.size() - 3, " more");
    usage_fail("--memory-format ", ops::format_name(format), ": ", list, refused.size() > 1 ? " have" : " has",
               " no channels-last computation yet. channels_last runs the convolutional families (resnet, vgg, "
               "alexnet, squeezenet, densenet, efficientnet: convolutions, batch norm, pooling, activations, "
               "their blocks), not Swin's layers; use --memory-format contiguous for this model");
  }
  format_ = format;
}

Tensor Model::forward(Context& ctx, const Tensor& x) {
  if (format_ == ops::MemoryFormat::contiguous || x.dim() != 4) return root_->forward(ctx, x);
  Tensor nhwc = Tensor::empty({x.size(0), x.size(2), x.size(3), x.size(1)}, x.dtype(), ctx.device);
  ops::permute(ctx, nhwc, x, {0, 2, 3, 1});
  return root_->forward(ctx, nhwc);
}

Tensor Model::backward(Context& ctx, const Tensor& dy) {
  Tensor dx = root_->backward(ctx, dy);
  if (format_ == ops::MemoryFormat::contiguous || !dx.defined() || dx.dim() != 4) return dx;
  Tensor nchw = Tensor::empty({dx.size(0), dx.size(3), dx.size(1), dx.size(2)}, dx.dtype(), ctx.device);
  ops::permute(ctx, nchw, dx, {0, 3, 1, 2});
  return nchw;
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
