// LayerNorm over the last dimension (torch.nn.LayerNorm(D), elementwise affine): Swin's
// normalisation of channels-last (B, H, W, C) maps and of token rows.
#pragma once
#include "core/rng.hpp"
#include "kernels/ops.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

class LayerNorm : public Cloneable<LayerNorm> {
 public:
  // Parameters "weight" (D) = 1 and "bias" (D) = 0, as torch.nn.LayerNorm.reset_parameters.
  explicit LayerNorm(int64_t normalized_shape, float eps = 1e-5f);

  Tensor forward(Context& ctx, const Tensor& x) override;    // (..., D) -> (..., D)
  Tensor backward(Context& ctx, const Tensor& dy) override;  // (..., D) -> (..., D)
  // dx added into `into` by the op (DxMode::add): a Swin block's second residual join.
  void backward_add(Context& ctx, const Tensor& dy, Tensor& into) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string describe() const override;
  void clear_cache() override { x_ = mean_ = rstd_ = Tensor(); }

  // Deterministic; the Rng is taken only so every layer has this signature.
  void reset_parameters(Rng& rng);
  void reset_parameters();

  int64_t normalized_shape() const { return d_; }
  float eps() const { return eps_; }
  Parameter& weight() { return param(0); }  // (D) gamma
  Parameter& bias() { return param(1); }    // (D) beta

 private:
  int64_t d_;
  float eps_;
  // backward's and backward_add's work.
  void backward_into(Context& ctx, const Tensor& dy, Tensor& dx, ops::DxMode dx_mode);
  Tensor x_;     // (..., D): forward's input (shared, not copied)
  Tensor mean_;  // (rows): per-row mean of the last forward, rows = numel / D
  Tensor rstd_;  // (rows): 1 / sqrt(biased variance + eps)
};

}  // namespace dpx::nn
