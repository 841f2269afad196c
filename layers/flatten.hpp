// Flatten: (N, d1, d2, ...) -> (N, d1*d2*...), as torch.nn.Flatten() (start_dim 1). Forward
// is a view; backward gives dy back in the input's shape.
#pragma once
#include "layers/module.hpp"

namespace dpx::nn {

class Flatten : public Cloneable<Flatten> {
 public:
  Flatten() = default;
  Tensor forward(Context& ctx, const Tensor& x) override;    // (N, ...) -> (N, -1), a view
  Tensor backward(Context& ctx, const Tensor& dy) override;  // (N, -1) -> (N, ...), fresh
  std::string type_name() const override { return "Flatten"; }
  std::string describe() const override { return "Flatten(start_dim=1, end_dim=-1)"; }

 private:
  Shape x_shape_;  // (N, ...)
};

}  // namespace dpx::nn
