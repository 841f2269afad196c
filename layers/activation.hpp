// Smooth activations as layers: GELU (exact erf form, torch.nn.GELU()), SiLU (torch.nn.SiLU,
// EfficientNet's) and Sigmoid (torch.nn.Sigmoid, squeeze-excitation's gate). No parameters;
// each keeps only what its backward reads.
#pragma once
#include "layers/module.hpp"

namespace dpx::nn {

class GELU : public Cloneable<GELU> {
 public:
  GELU() = default;
  Tensor forward(Context& ctx, const Tensor& x) override;  // any shape -> same shape
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "GELU"; }
  std::string describe() const override { return "GELU(approximate='none')"; }
  void clear_cache() override { x_ = Tensor(); }

 private:
  Tensor x_;  // like x: forward's input (shared, not copied); GELU' needs x
};

class SiLU : public Cloneable<SiLU> {
 public:
  SiLU() = default;
  Tensor forward(Context& ctx, const Tensor& x) override;  // any shape -> same shape
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "SiLU"; }
  std::string describe() const override { return "SiLU()"; }
  void clear_cache() override { x_ = Tensor(); }

 private:
  Tensor x_;  // like x: forward's input; SiLU' needs x
};

class Sigmoid : public Cloneable<Sigmoid> {
 public:
  Sigmoid() = default;
  Tensor forward(Context& ctx, const Tensor& x) override;  // any shape -> same shape
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "Sigmoid"; }
  std::string describe() const override { return "Sigmoid()"; }
  void clear_cache() override { y_ = Tensor(); }

 private:
  Tensor y_;  // like x: forward's output; sigmoid' = y (1 - y)
};

}  // namespace dpx::nn
