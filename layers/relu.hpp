// ReLU: y = max(x, 0) elementwise (torch.nn.ReLU). Backward needs only the output, so that is
// what it keeps.
#pragma once
#include "layers/module.hpp"

namespace dpx::nn {

class ReLU : public Cloneable<ReLU> {
 public:
  ReLU() = default;
  Tensor forward(Context& ctx, const Tensor& x) override;    // any shape -> same shape
  Tensor backward(Context& ctx, const Tensor& dy) override;  // dy where y > 0, else 0
  std::string type_name() const override { return "ReLU"; }
  std::string describe() const override { return "ReLU()"; }
  void clear_cache() override { y_ = Tensor(); }

 private:
  Tensor y_;  // like x: forward's output (shared with the next layer, not copied)
};

}  // namespace dpx::nn
