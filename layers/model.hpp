// Model: a root module plus the one contiguous buffer that holds all its parameters, and one
// for their gradients (as llm.c does; docs/ARCHITECTURE.md). Every Parameter's value and grad
// is a view at an offset into those buffers, so broadcast, all-reduce and the optimizer work on
// a few large ranges. Parameters are laid out in registration order.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

struct ParamSlot {
  std::string name;     // full state_dict name
  Parameter* param;
  int64_t offset;       // element offset into the flat buffers
  int64_t numel;
};

class Model {
 public:
  Model() = default;
  // Takes the module, moves it to `device` and gathers its parameters into the flat buffers.
  // The root is told it needs no input gradient (Module::set_input_grad_needed), so backward
  // skips the first layer's dx and everything before the first trainable layer.
  // Without `with_grads` the model has no gradient buffer (its parameters' grad stay undefined): a
  // model that is only copied from, as a job's initial model, need not hold a second copy of
  // its weights' size (VGG-16: 553 MB).
  explicit Model(std::unique_ptr<Module> root, Device device = Device::cpu(), bool with_grads = true);
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;

  Module& root() { return *root_; }
  Device device() const { return device_; }
  // Takes an (N, C, H, W) batch (or any input its first layer takes) in every memory format.
  Tensor forward(Context& ctx, const Tensor& x);
  // Accumulates the parameter gradients; the returned dx is undefined unless
  // root().set_input_grad_needed(true) was called.
  Tensor backward(Context& ctx, const Tensor& dy);

  // How the model's image maps lie in memory (--memory-format, as PyTorch's
  // model.to(memory_format=...)): channels_last sets every module to (N, H, W, C) maps, and
  // forward permutes its (N, C, H, W) input once (backward permutes the input's gradient back).
  // Parameters keep PyTorch's layouts, so weights and checkpoints do not depend on it. Fails,
  // naming the modules, where a module has no channels-last computation (the model is then left
  // as it was).
  void set_memory_format(ops::MemoryFormat format);
  ops::MemoryFormat memory_format() const { return format_; }
  void train(bool on = true) { root_->train(on); }
  void eval() { root_->train(false); }

  const std::vector<ParamSlot>& slots() const { return slots_; }
  Tensor& flat_params() { return flat_params_; }  // (num_parameters)
  const Tensor& flat_params() const { return flat_params_; }
  Tensor& flat_grads() { return flat_grads_; }    // (num_parameters)
  int64_t num_parameters() const { return flat_params_.numel(); }
  int64_t num_trainable() const;
  void zero_grad(Context& ctx);

  // A deep copy on another (or the same) device: the replica that DataParallel makes.
  Model clone(Device device) const;
  // Copies parameter values and buffers from another model of the same architecture.
  void copy_state_from(const Model& other);

  // Parameters and buffers by state_dict name (views, not copies).
  std::map<std::string, Tensor> state_dict();

 private:
  std::unique_ptr<Module> root_;
  Device device_;
  ops::MemoryFormat format_ = ops::MemoryFormat::contiguous;
  Tensor flat_params_, flat_grads_;
  std::vector<ParamSlot> slots_;
};

}  // namespace dpx::nn
