// SwinTransformerBlock (torchvision.models.swin_transformer.SwinTransformerBlock, Swin v1):
//   x = x + stochastic_depth(attn(norm1(x)));  x = x + stochastic_depth(mlp(norm2(x)))
// on channels-last (B, H, W, C) maps; the MLP is Linear, GELU, Dropout, Linear, Dropout.
#pragma once
#include <array>

#include "core/rng.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

class SwinTransformerBlock : public Cloneable<SwinTransformerBlock> {
 public:
  // Children norm1, attn (ShiftedWindowAttention), stochastic_depth (row mode), norm2, mlp
  // (hidden int(dim * mlp_ratio)), in torchvision's order. The MLP's Linear layers start
  // xavier-uniform with N(0, 1e-6) biases, as torchvision's block initialises them (a whole
  // SwinTransformer then re-initialises every Linear). dropout is torchvision's, 0.
  SwinTransformerBlock(int64_t dim, int64_t num_heads, std::array<int64_t, 2> window_size,
                       std::array<int64_t, 2> shift_size, Rng& rng, double mlp_ratio = 4.0,
                       float stochastic_depth_prob = 0.f);

  Tensor forward(Context& ctx, const Tensor& x) override;  // (B, H, W, C) -> (B, H, W, C)
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "SwinTransformerBlock"; }
  std::string describe() const override;
  void clear_cache() override;

 private:
  int64_t dim_;
  Tensor attn_noise_, mlp_noise_;  // (B, 1, 1, 1) or undefined: stochastic depth's two draws
  bool forwarded_ = false;
};

}  // namespace dpx::nn
