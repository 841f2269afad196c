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
  // Channels-last: an (N, H, W, C) map is flattened in (C, H, W) order, as the contiguous model
  // flattens it (so the Linear after it keeps its weights): a view where H = W = 1, else a permute.
  bool set_channels_last(bool on) override {
    channels_last_ = on;
    return true;
  }

 private:
  bool channels_last_ = false;
  bool permuted_ = false;  // the last forward permuted its input
  Shape x_shape_;  // (N, ...)
};

}  // namespace dpx::nn
