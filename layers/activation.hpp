// Elementwise activations as layers, without parameters: ReLU (torch.nn.ReLU), GELU (exact erf
// form, torch.nn.GELU()), SiLU (torch.nn.SiLU, EfficientNet's) and Sigmoid (torch.nn.Sigmoid,
// squeeze-excitation's gate). One class template serves them all: each keeps only the tensor its
// derivative reads (the input, or for ReLU and Sigmoid the output) and its backward returns a
// fresh dx: written over by ReLU's op (DxMode::overwrite), zeroed and added into by the others'.
#pragma once
#include <string>
#include <type_traits>

#include "layers/module.hpp"

namespace dpx::nn {

// An activation's ops and names (defined in activation.cpp).
struct ReluOps {
  static constexpr const char* name = "ReLU";
  static constexpr const char* repr = "ReLU()";
  static constexpr bool keeps_output = true;  // relu' is read from y (y > 0)
  static constexpr bool overwrites_dx = true;
  static void forward(Context& ctx, Tensor& y, const Tensor& x);
  static void backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& kept);
};
struct GeluOps {
  static constexpr const char* name = "GELU";
  static constexpr const char* repr = "GELU(approximate='none')";
  static constexpr bool keeps_output = false;  // GELU' needs x
  static constexpr bool overwrites_dx = true;
  static void forward(Context& ctx, Tensor& y, const Tensor& x);
  static void backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& kept);
};
struct SiluOps {
  static constexpr const char* name = "SiLU";
  static constexpr const char* repr = "SiLU()";
  static constexpr bool keeps_output = false;  // SiLU' needs x
  static constexpr bool overwrites_dx = true;
  static void forward(Context& ctx, Tensor& y, const Tensor& x);
  static void backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& kept);
};
struct SigmoidOps {
  static constexpr const char* name = "Sigmoid";
  static constexpr const char* repr = "Sigmoid()";
  static constexpr bool keeps_output = true;  // sigmoid' = y (1 - y)
  static constexpr bool overwrites_dx = true;
  static void forward(Context& ctx, Tensor& y, const Tensor& x);
  static void backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& kept);
};

template <class Ops>
class Activation : public Cloneable<Activation<Ops>> {
 public:
  Activation() = default;
  Tensor forward(Context& ctx, const Tensor& x) override;    // any shape -> same shape
  Tensor backward(Context& ctx, const Tensor& dy) override;  // dx (a fresh tensor) += dy * f'
  // ReLU's backward with dx in `dx_dtype`: f32, or under --precision bf16|fp16 the compute's half
  // type for the convolution before it, which takes it as its operand (ops.def, "half-precision
  // maps"; nn::backward_dx_dtype decides).
  Tensor backward(Context& ctx, const Tensor& dy, DType dx_dtype)
    requires std::is_same_v<Ops, ReluOps>;
  // In place of forward when the op before already applied this activation to its output y
  // (ops::Epilogue::relu): keeps y for backward and returns it, as forward would return its own.
  Tensor forward_applied(const Tensor& y)
    requires Ops::keeps_output
  {
    kept_ = y;
    return y;
  }
  // The last forward's output (undefined before forward): ReLU's derivative is read from it.
  const Tensor& output() const
    requires Ops::keeps_output
  {
    return kept_;
  }
  std::string type_name() const override { return Ops::name; }
  std::string describe() const override { return Ops::repr; }
  void clear_cache() override { kept_ = Tensor(); }
  bool set_channels_last(bool) override { return true; }  // elementwise

 private:
  Tensor backward_in(Context& ctx, const Tensor& dy, DType dx_dtype);  // both backwards
  Tensor kept_;  // like x: forward's input or output (shared with the neighbours, not copied)
};

using ReLU = Activation<ReluOps>;
using GELU = Activation<GeluOps>;
using SiLU = Activation<SiluOps>;
using Sigmoid = Activation<SigmoidOps>;

extern template class Activation<ReluOps>;
extern template class Activation<GeluOps>;
extern template class Activation<SiluOps>;
extern template class Activation<SigmoidOps>;

}  // namespace dpx::nn
