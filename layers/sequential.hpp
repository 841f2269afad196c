// Sequential: children run in order (torch.nn.Sequential). Children are named "0", "1", ...
// by position, or by the name given to add(name, module), so state_dict keys match
// torchvision's ("features.0.weight", "classifier.1.bias").
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "layers/module.hpp"

namespace dpx::nn {

// Runs parent's children [begin, end) in order on x and returns the last output, as a chain of
// child(i).forward. A batch norm followed by a ReLU or SiLU, and a convolution followed by a
// ReLU, run as one pass (ops::Epilogue; no tensor holds the values before the activation, and a
// ReLU keeps the output as its own): the values, and every gradient backward computes from
// them, are those of the two layers run one after the other (bit for bit on the CPU; the SiLU's
// backward recomputes its input as the forward formed it). Under --precision bf16|fp16
// (ctx.compute, ctx.half_maps) a convolution followed by a BatchNorm2d, and such a pair
// followed by a module that takes half-precision maps (Module::takes_half_maps), or by a max pool
// and then such a module, hand on their output in that precision, and so does that max pool
// (kernels/ops.def, "half-precision maps"): a map's dtype is chosen here, where its writer and its
// reader are known. `then_half`: whether what reads the range's output takes such maps (Fire's
// squeeze output, read by its two expand convolutions); only the range's last pair or max pool
// then writes it in half precision.
Tensor forward_children(Context& ctx, Module& parent, size_t begin, size_t end, Tensor x, bool then_half = false);
// The reverse: children [begin, end) from the last, dy in and dx out, as a chain of
// child(i).backward (input_grad_needed set by the caller). A ReLU's or SiLU's backward is folded
// into the batch norm's before it (batch_norm_backward's relu_out, silu_beta). Under --precision
// bf16|fp16 some gradients between children are in that precision (backward_dx_dtype). With
// `add_into`, the first child's dx is added into that tensor (Module::backward_add), which is
// returned. `first_dx`: the dtype of the first child's dx, as backward_dx_dtype names it for that
// child in a longer range (the caller's: a parent's for a Sequential that starts with a
// convolution; DenseBlock's for the convolution after the batch norm and ReLU it ran itself).
Tensor backward_children(Context& ctx, Module& parent, size_t begin, size_t end, Tensor dy, Tensor* add_into = nullptr,
                         DType first_dx = DType::f32);
// The dtype of the gradient child i's backward hands to child i - 1 in backward_children over
// [begin, ..): under --precision bf16|fp16 (ctx.half_maps) the compute's half type for a ReLU
// after a convolution (that convolution's dy, which cuDNN takes rounded anyway), a convolution
// after a max pool, a batch norm (alone or with the ReLU or SiLU after it run as one) or a ReLU
// whose backward runs alone (cuDNN's half result as it is, which the fp32 path widened
// unchanged), and a max pool after such a ReLU after a convolution (the fp32 sum rounded once,
// where the ReLU's dx rounded it: rounding commutes with its mask), so that no value differs from
// the fp32 maps' (ops.def, "half-precision maps"); else f32. Child i must be a ReLU, Conv2d,
// MaxPool2d or Sequential itself, not a subclass (whose backward override the half form would
// pass over). A Sequential child whose first child is a Conv2d hands a half gradient as that
// convolution would; one whose last child is a batch norm (alone or with its activation run as
// one) or a ReLU alone reads one as they do (EfficientNet's blocks, Sequentials of conv-norm-
// activation Sequentials); a leading or trailing max pool does not count there. (A batch norm's
// own dx has its x's dtype, half where a convolution's output was: not named here.)
DType backward_dx_dtype(const Context& ctx, Module& parent, size_t begin, size_t i);
// The dtype of the map child j of [.., end) takes as forward_children hands it (the compute's half
// precision where j takes such maps, at `end` where then_half says so: ops.def, "half-precision
// maps"); for a caller that runs some children itself too (DenseBlock runs a dense layer's batch
// norm and ReLU over its buffer).
DType map_dtype_for(const Context& ctx, Module& parent, size_t j, size_t end, bool then_half = false);

class Sequential : public Cloneable<Sequential> {
 public:
  Sequential() = default;
  template <class... M>
  explicit Sequential(std::unique_ptr<M>... modules) {
    (add(std::move(modules)), ...);
  }

  // Appends a child named by its position ("0", "1", ...).
  Module& add(std::unique_ptr<Module> module);
  // Appends a child under a name of its own; names must be unique and contain no '.'.
  Module& add(const std::string& name, std::unique_ptr<Module> module);
  // seq.emplace<Conv2d>(3, 64, 3, rng) builds, appends and returns the new child.
  template <class M, class... Args>
  M& emplace(Args&&... args) {
    return static_cast<M&>(add(std::make_unique<M>(std::forward<Args>(args)...)));
  }
  size_t size() const { return num_children(); }
  // Puts `module` in place of the child called `name` and returns the old one (a model's
  // classifier swapped for another head).
  std::unique_ptr<Module> replace(const std::string& name, std::unique_ptr<Module> module);

  Tensor forward(Context& ctx, const Tensor& x) override;    // each child in order
  // The same, its output in the compute's half precision where its last batch norm and activation
  // pair, convolution and ReLU pair or max pool writes it and `then_half` says its reader takes
  // such maps (forward_children's then_half: a parent's forward_children passes it).
  Tensor forward(Context& ctx, const Tensor& x, bool then_half);
  // Each child in reverse order. When the caller needs no dx (input_grad_needed() false), it
  // stops at the first child with trainable parameters, which is told it needs no dx either,
  // and returns an undefined Tensor: children before it have nothing to learn.
  Tensor backward(Context& ctx, const Tensor& dy) override;
  // The same, its first child's dx in dx_dtype where that child is a Conv2d (backward_children's
  // first_dx: a parent's backward_children passes what backward_dx_dtype says).
  Tensor backward(Context& ctx, const Tensor& dy, DType dx_dtype);
  std::string type_name() const override { return "Sequential"; }
  bool takes_half_maps() const override;  // its first child's answer
  bool set_channels_last(bool) override { return true; }  // its children decide
  // "Sequential(0: Conv2d, 1: ReLU, 2: MaxPool2d)": one line; children describe their settings.
  std::string describe() const override;
};

}  // namespace dpx::nn
