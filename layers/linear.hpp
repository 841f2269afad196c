// Linear: y = x W^T + b over the last dimension (torch.nn.Linear). Any leading dimensions are
// treated as rows, so (N, in) and (B, L, in) both work.
#pragma once
#include "core/rng.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

class Linear : public Cloneable<Linear> {
 public:
  // Parameters "weight" (out, in) and, with bias, "bias" (out); initialised from rng.
  Linear(int64_t in_features, int64_t out_features, Rng& rng, bool bias = true);

  Tensor forward(Context& ctx, const Tensor& x) override;    // x (..., in) -> (..., out)
  Tensor backward(Context& ctx, const Tensor& dy) override;  // dy (..., out) -> dx (..., in)
  std::string type_name() const override { return "Linear"; }
  std::string describe() const override;
  void clear_cache() override { x_ = Tensor(); }
  // It takes the (N, features) rows that Flatten gives in either format; on channels-last it
  // refuses an image map, whose last dimension would be C instead of W.
  bool set_channels_last(bool on) override {
    channels_last_ = on;
    return true;
  }
  // 2 rows in out: the multiply-adds of the last forward, bias not counted.
  int64_t last_forward_flops() const override { return last_flops_; }

  // W, b ~ U(-1/sqrt(in), 1/sqrt(in)), as torch.nn.Linear.reset_parameters.
  void reset_parameters(Rng& rng);

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  bool has_bias() const { return has_bias_; }
  Parameter& weight() { return param(0); }                      // (out, in)
  Parameter* bias() { return has_bias_ ? &param(1) : nullptr; }  // (out)

 private:
  int64_t in_, out_;
  bool has_bias_;
  bool channels_last_ = false;
  Tensor x_;       // (rows, in): the forward input seen as rows (a view), for dW
  Shape x_shape_;  // the input's own shape, given back to dx
  int64_t last_flops_ = 0;
};

}  // namespace dpx::nn
