// Sequential: child naming, and forward/backward over the children in order and reverse;
// forward_children and backward_children, which run a batch norm or a convolution and the ReLU
// after it as one.
#include "layers/sequential.hpp"

#include <optional>

#include "kernels/ops.hpp"
#include "layers/activation.hpp"
#include "layers/batch_norm.hpp"
#include "layers/conv2d.hpp"

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

namespace {
// A batch norm (2d or 1d: one of the two pointers) and the ReLU after it, run as one.
struct BnRelu {
  BatchNorm2d* bn2d;
  BatchNorm1d* bn1d;
  ReLU* relu;
  // Forward of both, the ReLU folded into the batch norm's pass.
  Tensor forward(Context& ctx, const Tensor& x) {
    return relu->forward_applied(
        with_bn([&](auto& norm) { return norm.forward(ctx, x, ops::Epilogue::relu); }));
  }
  // Backward of both, the ReLU's folded into the batch norm's; the ReLU's kept output is freed
  // after it, as its own backward would (nn::FreeSaved).
  Tensor backward(Context& ctx, const Tensor& dy) {
    Tensor dx = with_bn([&](auto& norm) { return norm.backward(ctx, dy, &relu->output()); });
    relu->clear_cache();
    return dx;
  }
  template <class F>
  Tensor with_bn(F&& f) {
    return bn2d ? f(*bn2d) : f(*bn1d);
  }
};

std::optional<BnRelu> bn_relu(Module& first, Module& second) {
  auto* relu = dynamic_cast<ReLU*>(&second);
  if (!relu) return std::nullopt;
  BnRelu pair{dynamic_cast<BatchNorm2d*>(&first), dynamic_cast<BatchNorm1d*>(&first), relu};
  if (!pair.bn2d && !pair.bn1d) return std::nullopt;
  return pair;
}

// Children i and i + 1 run forward as one where i is a batch norm or a convolution and i + 1 a
// ReLU: the first applies the ReLU to its output (ops::Epilogue::relu) and the ReLU keeps that
// output as its own. Returns whether they did (x then holds the ReLU's output).
bool forward_pair(Context& ctx, Module& first, Module& second, Tensor& x) {
  if (auto pair = bn_relu(first, second)) {
    x = pair->forward(ctx, x);
    return true;
  }
  auto* conv = dynamic_cast<Conv2d*>(&first);
  auto* relu = dynamic_cast<ReLU*>(&second);
  if (!conv || !relu) return false;
  x = relu->forward_applied(conv->forward(ctx, x, ops::Epilogue::relu));
  return true;
}
}  // namespace

Tensor forward_children(Context& ctx, Module& parent, size_t begin, size_t end, Tensor x) {
  for (size_t i = begin; i < end; ++i) {
    if (i + 1 < end && forward_pair(ctx, parent.child(i), parent.child(i + 1), x))
      ++i;
    else
      x = parent.child(i).forward(ctx, x);
  }
  return x;
}

Tensor backward_children(Context& ctx, Module& parent, size_t begin, size_t end, Tensor dy) {
  for (size_t i = end; i-- > begin;) {
    auto pair = i > begin ? bn_relu(parent.child(i - 1), parent.child(i)) : std::nullopt;
    // A ReLU that has not run forward goes alone: its own backward says so.
    if (pair && pair->relu->output().defined()) {
      dy = pair->backward(ctx, dy);
      --i;
    } else {
      dy = parent.child(i).backward(ctx, dy);
    }
  }
  return dy;
}

Tensor Sequential::forward(Context& ctx, const Tensor& x) {
  return forward_children(ctx, *this, 0, num_children(), x);
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
  for (size_t i = first; i < num_children(); ++i)
    child(i).set_input_grad_needed(i > first || input_grad_needed());
  Tensor g = backward_children(ctx, *this, first, num_children(), dy);
  return first == 0 ? g : Tensor();
}

}  // namespace dpx::nn
