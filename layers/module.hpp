// Module: the unit of a model. forward(ctx, x) computes and (in training) caches what backward
// needs; backward(ctx, dy) accumulates parameter gradients and returns dx. There is no tape:
// composite modules write their own backward over their children.
//
// Parameters, buffers and children are registered under their torchvision names, so the full
// dotted name of a parameter is its state_dict key (`layer1.0.conv1.weight`). Subclasses reach
// them by index (param(0), child<Conv2d>(1)), never by stored pointer, so that the generic
// clone (copy constructor) makes an independent deep copy.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/context.hpp"
#include "core/tensor.hpp"

namespace dpx::nn {

struct Parameter {
  std::string name;         // local name ("weight"); Module::named_parameters gives full names
  Tensor value;             // a view into the model's flat parameter buffer once in a Model
  Tensor grad;              // a view into the flat gradient buffer (undefined until then)
  bool requires_grad = true;
};

// The position of a layer's own random stream (Dropout, StochasticDepth): the generator and how
// many draws it made. Checkpoints save it so that a resumed run draws the same masks.
struct RandomState {
  uint64_t seed = 0, stream = 0, draws = 0;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module& other);  // deep copy: new parameter and buffer storage, cloned children
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(Context& ctx, const Tensor& x) = 0;
  virtual Tensor backward(Context& ctx, const Tensor& dy) = 0;
  // backward with dx added into `into` (the input's shape, fp32, a tensor of the caller's own that
  // nothing else reads afterwards) instead of returned: where the input also took another path (a
  // residual join), the two gradients meet in the op that makes this one, through its
  // DxMode::add (Conv2d, LayerNorm), rather than in a pass of their own. By default, backward and
  // then into += its dx. Only called where input_grad_needed() is true.
  virtual void backward_add(Context& ctx, const Tensor& dy, Tensor& into);
  virtual std::unique_ptr<Module> clone() const = 0;
  virtual std::string type_name() const = 0;
  // One line describing the configuration, e.g. "Conv2d(3, 64, kernel=7, stride=2, pad=3)".
  virtual std::string describe() const { return type_name(); }
  // Makes this module's own computation take channels-last maps (N, H, W, C) in place of (N, C, H,
  // W), or contiguous ones again (--memory-format; Model::set_memory_format walks every module).
  // Returns whether it can: by default a module can only stay contiguous, so that a layer whose
  // kernels or shape checks know only (N, C, H, W) refuses, and with it the model. Layers that do
  // not care where the channels lie (elementwise, or composites of other modules) say so.
  virtual bool set_channels_last(bool on) { return !on; }
  // Whether forward takes its input as a half-precision map (kernels/ops.def) as it is, so that
  // under --precision bf16|fp16 the module before it may hand its output on in that precision
  // (nn::forward_children decides): a convolution (its cuDNN operand), a ResNet block, Fire, and a
  // Sequential whose first child does. By default a module takes fp32.
  virtual bool takes_half_maps() const { return false; }

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  // Recursive, in registration order, with full dotted names.
  std::vector<std::pair<std::string, Parameter*>> named_parameters(const std::string& prefix = "");
  std::vector<std::pair<std::string, Tensor*>> named_buffers(const std::string& prefix = "");
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");

  size_t num_children() const { return children_.size(); }
  Module& child(size_t i) { return *children_.at(i).second; }
  template <typename M> M& child(size_t i) { return static_cast<M&>(child(i)); }
  const std::string& child_name(size_t i) const { return children_.at(i).first; }
  Parameter& param(size_t i) { return *params_.at(i); }
  const Parameter& param(size_t i) const { return *params_.at(i); }
  size_t num_params() const { return params_.size(); }
  Tensor& buffer(size_t i) { return buffers_.at(i)->second; }

  // Called with each parameter as soon as its gradient is final for this backward pass
  // (DistributedDataParallel starts bucket all-reduces from it). Set on the root; applies to
  // every descendant.
  using GradReadyHook = std::function<void(Parameter&)>;
  void set_grad_ready_hook(GradReadyHook hook);

  // Moves parameter values (when not yet in a flat buffer) and buffers to a device.
  void to(Device device);
  // Drops tensors cached by forward for backward (frees activation memory).
  virtual void clear_cache() {
    for (auto& c : children_) c.second->clear_cache();
  }

  // Whether the caller of backward needs dx. When false, backward may skip computing it and
  // return an undefined Tensor: Conv2d and Linear then compute only their parameter gradients,
  // and Sequential stops at its first child with trainable parameters. A parent sets it on a
  // child before each backward; a Model sets it false on its root, since nothing needs the
  // gradient of a batch of images (so a frozen backbone gets no backward at all). A new module,
  // or a copy, starts with true.
  void set_input_grad_needed(bool needed) { input_grad_needed_ = needed; }
  bool input_grad_needed() const { return input_grad_needed_; }
  // True when this module or a descendant has a parameter with requires_grad.
  bool has_trainable_parameters() const;

  // Floating-point operations of this module's own arithmetic in its last forward, its
  // children's excluded: 2 per multiply-add of a convolution or matrix product (Conv2d,
  // Linear). 0 for layers that count nothing (normalisation, activations, pooling, additions).
  // `dpx models` sums it over a forward's modules.
  virtual int64_t last_forward_flops() const { return 0; }

  // This layer's own random stream, for layers that draw (none by default; children excluded).
  virtual std::optional<RandomState> random_state() const { return std::nullopt; }
  virtual void set_random_state(const RandomState&) {}

 protected:
  Parameter& add_parameter(const std::string& name, const Shape& shape, bool requires_grad = true);
  Tensor& add_buffer(const std::string& name, Tensor value);
  Module& add_module(const std::string& name, std::unique_ptr<Module> m);
  // Puts `m` in place of the child called `name` (same position) and returns the old child.
  std::unique_ptr<Module> replace_module(const std::string& name, std::unique_ptr<Module> m);
  void grad_ready(Parameter& p) const {
    if (hook_ && *hook_ && p.requires_grad) (*hook_)(p);
  }

 private:
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<std::unique_ptr<std::pair<std::string, Tensor>>> buffers_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  std::shared_ptr<GradReadyHook> hook_;
  bool training_ = true;
  bool input_grad_needed_ = true;
};

// Gives a module class its clone() through its copy constructor.
template <typename Derived>
class Cloneable : public Module {
 public:
  std::unique_ptr<Module> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

}  // namespace dpx::nn
