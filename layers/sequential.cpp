// Sequential: child naming, and forward/backward over the children in order and reverse;
// forward_children and backward_children, which run a batch norm and the ReLU or SiLU after it,
// or a convolution and the ReLU after it, as one, and under --precision bf16|fp16 hand a
// convolution's output to the batch norm after it, and an activated output to a module that takes
// half-precision maps (a convolution, a ResNet block, Fire), directly or through a max pool, in
// the compute's half precision, and in backward the gradients between a convolution and the ReLU,
// max pool or batch norm beside it (backward_dx_dtype).
#include "layers/sequential.hpp"

#include <optional>
#include <typeinfo>

#include "kernels/ops.hpp"
#include "layers/activation.hpp"
#include "layers/batch_norm.hpp"
#include "layers/conv2d.hpp"
#include "layers/pooling.hpp"

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
// Whether maps are handed on in ctx.compute's half precision (Context::half_maps).
bool half_maps(const Context& ctx) { return ctx.compute != DType::f32 && ctx.half_maps; }

// A batch norm (2d or 1d: one of the two pointers) and the ReLU or SiLU after it (one of the
// two), run as one.
struct BnActivation {
  BatchNorm2d* bn2d;
  BatchNorm1d* bn1d;
  ReLU* relu;
  SiLU* silu;
  ops::Epilogue epilogue() const { return relu ? ops::Epilogue::relu : ops::Epilogue::silu; }
  template <class F>
  auto with_bn(F&& f) {
    return bn2d ? f(*bn2d) : f(*bn1d);
  }
  // Forward of both, the activation folded into the batch norm's pass. The ReLU keeps that output
  // as its own (its backward reads it); the SiLU keeps nothing: its input is never written, and
  // the batch norm's backward recomputes it. y_dtype: the output's (half before a convolution).
  Tensor forward(Context& ctx, const Tensor& x, DType y_dtype) {
    Tensor y = with_bn([&](auto& norm) { return norm.forward(ctx, x, epilogue(), y_dtype); });
    return relu ? relu->forward_applied(y) : y;
  }
  // Whether the last forward ran as one (the batch norm applied this activation).
  bool ran_as_one() {
    return with_bn([&](auto& norm) { return norm.applied(); }) == epilogue();
  }
  // Backward of both, the activation's folded into the batch norm's; the ReLU's kept output is
  // freed after it, as its own backward would (nn::FreeSaved).
  Tensor backward(Context& ctx, const Tensor& dy) {
    Tensor dx = with_bn([&](auto& norm) { return norm.backward(ctx, dy, relu ? &relu->output() : nullptr); });
    if (relu) relu->clear_cache();
    return dx;
  }
};

std::optional<BnActivation> bn_activation(Module& first, Module& second) {
  BnActivation pair{dynamic_cast<BatchNorm2d*>(&first), dynamic_cast<BatchNorm1d*>(&first),
                    dynamic_cast<ReLU*>(&second), dynamic_cast<SiLU*>(&second)};
  if ((!pair.bn2d && !pair.bn1d) || (!pair.relu && !pair.silu)) return std::nullopt;
  return pair;
}

// Whether child j of parent's children [.., end) takes its input in ctx.compute's half precision
// (ops.def, "half-precision maps"): a module that takes such maps (Module::takes_half_maps), or a
// max pool followed by one, which then pools the half map into a half map. At `end`, what the
// caller says of the reader after the range (`then_half`).
bool takes_half(const Context& ctx, Module& parent, size_t j, size_t end, bool then_half) {
  if (!half_maps(ctx)) return false;
  if (j >= end) return then_half;
  Module& m = parent.child(j);
  if (dynamic_cast<MaxPool2d*>(&m)) return takes_half(ctx, parent, j + 1, end, then_half);
  return m.takes_half_maps();
}

// Children i and i + 1 run forward as one where i is a batch norm and i + 1 a ReLU or SiLU, or i
// a convolution and i + 1 a ReLU: the first applies the activation to its output (ops::Epilogue),
// in y_dtype (half where the child after the pair takes it: map_dtype). Returns whether they did
// (x then holds the activation's output).
bool forward_pair(Context& ctx, Module& first, Module& second, DType y_dtype, Tensor& x) {
  if (auto pair = bn_activation(first, second)) {
    x = pair->forward(ctx, x, y_dtype);
    return true;
  }
  auto* conv = dynamic_cast<Conv2d*>(&first);
  auto* relu = dynamic_cast<ReLU*>(&second);
  if (!conv || !relu) return false;
  x = relu->forward_applied(conv->forward(ctx, x, ops::Epilogue::relu, y_dtype));
  return true;
}

// Whether the ReLU at child i runs its backward alone: not folded into a batch norm's before it.
bool relu_alone(Module& parent, size_t begin, size_t i) {
  if (!dynamic_cast<ReLU*>(&parent.child(i))) return false;
  if (i == begin) return true;
  auto pair = bn_activation(parent.child(i - 1), parent.child(i));
  return !pair || !pair->ran_as_one();
}

// Whether child i's backward reads a half-precision dy as it is: a batch norm, alone or with the
// ReLU or SiLU after it run as one (batch_norm_backward's dy), or a ReLU run alone (relu_backward's).
bool reads_half_dy(Module& parent, size_t begin, size_t i) {
  Module& m = parent.child(i);
  if (typeid(m) == typeid(Sequential))  // as its last child does (its backward is backward_children)
    return m.num_children() > 0 && reads_half_dy(m, 0, m.num_children() - 1);
  if (dynamic_cast<BatchNorm2d*>(&m) || dynamic_cast<BatchNorm1d*>(&m)) return true;
  if (i > begin)
    if (auto pair = bn_activation(parent.child(i - 1), m); pair && pair->ran_as_one()) return true;
  return relu_alone(parent, begin, i);
}

// Child i's backward under backward_dx_dtype's half precision (a ReLU, a convolution or a max pool).
Tensor backward_half(Context& ctx, Module& m, const Tensor& dy) {
  if (auto* relu = dynamic_cast<ReLU*>(&m)) return relu->backward(ctx, dy, ctx.compute);
  if (auto* seq = dynamic_cast<Sequential*>(&m)) return seq->backward(ctx, dy, ctx.compute);
  if (auto* pool = dynamic_cast<MaxPool2d*>(&m)) return pool->backward(ctx, dy, ctx.compute);
  return dynamic_cast<Conv2d&>(m).backward(ctx, dy, ctx.compute);
}

// A convolution whose output only the batch norm after it reads (Conv2d::forward_to_norm): under
// --precision bf16|fp16 that map stays in half precision.
Conv2d* conv_before_norm(Module& first, Module& second) {
  auto* conv = dynamic_cast<Conv2d*>(&first);
  return conv && dynamic_cast<BatchNorm2d*>(&second) ? conv : nullptr;
}
}  // namespace

DType map_dtype_for(const Context& ctx, Module& parent, size_t j, size_t end, bool then_half) {
  return takes_half(ctx, parent, j, end, then_half) ? ctx.compute : DType::f32;
}

Tensor forward_children(Context& ctx, Module& parent, size_t begin, size_t end, Tensor x, bool then_half) {
  // The dtype of the map child j - 1 hands to child j.
  auto map_dtype = [&](size_t j) { return map_dtype_for(ctx, parent, j, end, then_half); };
  for (size_t i = begin; i < end; ++i) {
    if (i + 1 < end && forward_pair(ctx, parent.child(i), parent.child(i + 1), map_dtype(i + 2), x))
      ++i;
    else if (Conv2d* conv = i + 1 < end ? conv_before_norm(parent.child(i), parent.child(i + 1)) : nullptr)
      x = conv->forward_to_norm(ctx, x);
    else if (auto* pool = dynamic_cast<MaxPool2d*>(&parent.child(i)))
      x = pool->forward(ctx, x, map_dtype(i + 1));
    else if (typeid(parent.child(i)) == typeid(Sequential))
      x = static_cast<Sequential&>(parent.child(i)).forward(ctx, x, map_dtype(i + 1) != DType::f32);
    else
      x = parent.child(i).forward(ctx, x);
  }
  return x;
}

DType backward_dx_dtype(const Context& ctx, Module& parent, size_t begin, size_t i) {
  if (!half_maps(ctx) || i == begin) return DType::f32;
  Module& m = parent.child(i);
  Module& before = parent.child(i - 1);
  // Only the classes themselves: backward_half calls their non-virtual backward with a dtype, which
  // would pass over a subclass's override of backward(ctx, dy).
  const std::type_info& type = typeid(m);
  bool half = false;
  if (type == typeid(ReLU))  // the convolution's dy, which cuDNN takes rounded anyway
    half = dynamic_cast<Conv2d*>(&before) != nullptr;
  else if (type == typeid(Conv2d))  // cuDNN's half result as it is, which the fp32 path widened
    half = dynamic_cast<MaxPool2d*>(&before) || reads_half_dy(parent, begin, i - 1);
  else if (type == typeid(MaxPool2d))  // what that ReLU's dx would round
    half = dynamic_cast<ReLU*>(&before) && backward_dx_dtype(ctx, parent, begin, i - 1) != DType::f32;
  else if (type == typeid(Sequential))  // as its first child, a convolution, would hand it
    half = m.num_children() > 0 && typeid(m.child(0)) == typeid(Conv2d) &&
           (dynamic_cast<MaxPool2d*>(&before) || reads_half_dy(parent, begin, i - 1));
  return half ? ctx.compute : DType::f32;
}

Tensor backward_children(Context& ctx, Module& parent, size_t begin, size_t end, Tensor dy, Tensor* add_into,
                         DType first_dx) {
  for (size_t i = end; i-- > begin;) {
    auto pair = i > begin ? bn_activation(parent.child(i - 1), parent.child(i)) : std::nullopt;
    // An activation that did not run as one with its batch norm goes alone.
    if (pair && pair->ran_as_one()) {
      dy = pair->backward(ctx, dy);
      --i;
    } else if (backward_dx_dtype(ctx, parent, begin, i) != DType::f32) {
      dy = backward_half(ctx, parent.child(i), dy);
    } else if (i == begin && first_dx != DType::f32) {  // what the caller's backward_dx_dtype named
      dy = backward_half(ctx, parent.child(i), dy);
    } else if (add_into && i == begin) {
      parent.child(i).backward_add(ctx, dy, *add_into);
      return *add_into;
    } else {
      dy = parent.child(i).backward(ctx, dy);
    }
  }
  if (!add_into) return dy;
  ops::axpy(ctx, *add_into, 1.f, dy);  // the first child went as one with the second
  return *add_into;
}

bool Sequential::takes_half_maps() const {
  auto& self = const_cast<Sequential&>(*this);  // child() has no const overload in Module
  return num_children() > 0 && self.child(0).takes_half_maps();
}

Tensor Sequential::forward(Context& ctx, const Tensor& x) {
  return forward_children(ctx, *this, 0, num_children(), x);
}

Tensor Sequential::forward(Context& ctx, const Tensor& x, bool then_half) {
  return forward_children(ctx, *this, 0, num_children(), x, then_half);
}

Tensor Sequential::backward(Context& ctx, const Tensor& dy) { return backward(ctx, dy, DType::f32); }

Tensor Sequential::backward(Context& ctx, const Tensor& dy, DType dx_dtype) {
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
  Tensor g = backward_children(ctx, *this, first, num_children(), dy, nullptr, first == 0 ? dx_dtype : DType::f32);
  return first == 0 ? g : Tensor();
}

}  // namespace dpx::nn
