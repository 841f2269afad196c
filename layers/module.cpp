// Module (see module.hpp): registration of parameters, buffers and children under their
// torchvision names, the gradient-ready hook, moving to a device, and backward_add's default.
#include "layers/module.hpp"

#include "kernels/ops.hpp"

namespace dpx::nn {

Module::Module(const Module& other) : training_(other.training_) {
  for (const auto& p : other.params_) {
    auto q = std::make_unique<Parameter>(*p);
    q->value = p->value.defined() ? p->value.clone() : Tensor();
    q->grad = Tensor();  // a copy gets its own gradient storage from its Model
    params_.push_back(std::move(q));
  }
  for (const auto& b : other.buffers_)
    buffers_.push_back(std::make_unique<std::pair<std::string, Tensor>>(
        b->first, b->second.defined() ? b->second.clone() : Tensor()));
  for (const auto& [name, c] : other.children_) children_.emplace_back(name, c->clone());
  // The hook is not copied: a replica belongs to whoever sets its hook.
}

void Module::backward_add(Context& ctx, const Tensor& dy, Tensor& into) {
  ops::axpy(ctx, into, 1.f, backward(ctx, dy));
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters(const std::string& prefix) {
  std::vector<std::pair<std::string, Parameter*>> out;
  for (auto& p : params_) out.emplace_back(prefix + p->name, p.get());
  for (auto& [name, c] : children_) {
    auto sub = c->named_parameters(prefix + name + ".");
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers(const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& b : buffers_) out.emplace_back(prefix + b->first, &b->second);
  for (auto& [name, c] : children_) {
    auto sub = c->named_buffers(prefix + name + ".");
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [name, c] : children_) {
    out.emplace_back(prefix + name, c.get());
    auto sub = c->named_modules(prefix + name + ".");
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

void Module::set_grad_ready_hook(GradReadyHook hook) {
  auto shared = std::make_shared<GradReadyHook>(std::move(hook));
  hook_ = shared;
  for (auto& [name, m] : named_modules()) m->hook_ = shared;
}

void Module::to(Device device) {
  for (auto& p : params_)
    if (p->value.defined() && !(p->value.device() == device)) p->value = p->value.to(device);
  for (auto& b : buffers_)
    if (b->second.defined() && !(b->second.device() == device)) b->second = b->second.to(device);
  for (auto& c : children_) c.second->to(device);
}

Parameter& Module::add_parameter(const std::string& name, const Shape& shape, bool requires_grad) {
  auto p = std::make_unique<Parameter>();
  p->name = name;
  p->value = Tensor::zeros(shape);
  p->requires_grad = requires_grad;
  params_.push_back(std::move(p));
  return *params_.back();
}

Tensor& Module::add_buffer(const std::string& name, Tensor value) {
  buffers_.push_back(std::make_unique<std::pair<std::string, Tensor>>(name, std::move(value)));
  return buffers_.back()->second;
}

std::unique_ptr<Module> Module::replace_module(const std::string& name, std::unique_ptr<Module> m) {
  DPX_CHECK(m != nullptr, "replace_module(\"", name, "\"): the module is null");
  for (auto& [child_name, c] : children_) {
    if (child_name != name) continue;
    if (hook_) m->set_grad_ready_hook(*hook_);
    m->train(training_);
    std::swap(c, m);
    return m;
  }
  fail("replace_module: ", type_name(), " has no child named \"", name, "\"");
}

bool Module::has_trainable_parameters() const {
  for (const auto& p : params_)
    if (p->requires_grad) return true;
  for (const auto& [name, c] : children_)
    if (c->has_trainable_parameters()) return true;
  return false;
}

Module& Module::add_module(const std::string& name, std::unique_ptr<Module> m) {
  if (hook_) m->set_grad_ready_hook(*hook_);
  children_.emplace_back(name, std::move(m));
  return *children_.back().second;
}

}  // namespace dpx::nn
