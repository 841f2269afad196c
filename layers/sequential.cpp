// Sequential: child naming, and forward/backward over the children in order and reverse.
#include "layers/sequential.hpp"

#include "kernels/ops.hpp"

namespace dpx::nn {

Module& Sequential::add(std::unique_ptr<Module> module) {
  return add(std::to_string(num_children()), std::move(module));
}

Module& Sequential::add(const std::string& name, std::unique_ptr<Module> module) {
  DPX_CHECK(module != nullptr, "Sequential::add(\"", name, "\"): the module is null");
  if (name.empty() || name.find('.') != std::string::npos)
    fail("Sequential::add(\"", name, "\"): a child name must be non-empty and contain no '.'");
  for (size_t i = 0; i < num_children(); ++i)
    if (child_name(i) == name) fail("Sequential::add: a child named \"", name, "\" already exists");
  module->train(training());
  return add_module(name, std::move(module));
}

std::unique_ptr<Module> Sequential::replace(const std::string& name, std::unique_ptr<Module> module) {
  return replace_module(name, std::move(module));
}

std::string Sequential::describe() const {
  std::string s = "Sequential(";
  auto& self = const_cast<Sequential&>(*this);  // child() has no const overload in Module
  for (size_t i = 0; i < num_children(); ++i)
    s += (i ? ", " : "") + child_name(i) + ": " + self.child(i).type_name();
  return s + ")";
}

Tensor Sequential::forward(Context& ctx, const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < num_children(); ++i) h = child(i).forward(ctx, h);
  return h;
}

Tensor Sequential::backward(Context& ctx, const Tensor& dy) {
  if (num_children() == 0) {  // the identity; dx is still a tensor of its own
    Tensor dx = Tensor::empty(dy.shape(), DType::f32, ctx.device);
    ops::copy(ctx, dx, dy);
    return dx;
  }
  size_t first = 0;  // the earliest child that backward must reach
  if (!input_grad_needed()) {
    first = num_children();
    for (size_t i = 0; i < num_children(); ++i)
      if (child(i).has_trainable_parameters()) {
        first = i;
        break;
      }
    if (first == num_children()) return Tensor();  // nothing to learn here at all
  }
  Tensor g = dy;
  for (size_t i = num_children(); i-- > first;) {
    child(i).set_input_grad_needed(i > first || input_grad_needed());
    g = child(i).backward(ctx, g);
  }
  return first == 0 ? g : Tensor();
}

}  // namespace dpx::nn
