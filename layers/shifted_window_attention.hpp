// ShiftedWindowAttention (torchvision.models.swin_transformer.ShiftedWindowAttention, Swin v1):
// multi-head self-attention inside non-overlapping windows of a channels-last map, with a
// learned relative position bias, optional cyclic shift (with its mask) and padding to the window.
#pragma once
#include <array>
#include <map>

#include "core/rng.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

class ShiftedWindowAttention : public Cloneable<ShiftedWindowAttention> {
 public:
  // Parameter "relative_position_bias_table" ((2 wh - 1)(2 ww - 1), heads) ~ trunc_normal(0.02),
  // buffer "relative_position_index" (wh ww wh ww) i64 (persistent, in torchvision's state_dict),
  // children "qkv" Linear(dim, 3 dim) and "proj" Linear(dim, dim). Attention and output dropout
  // are torchvision's defaults, 0, and not modelled.
  ShiftedWindowAttention(int64_t dim, std::array<int64_t, 2> window_size, std::array<int64_t, 2> shift_size,
                         int64_t num_heads, Rng& rng, bool qkv_bias = true, bool proj_bias = true);

  Tensor forward(Context& ctx, const Tensor& x) override;  // (B, H, W, C) -> (B, H, W, C)
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "ShiftedWindowAttention"; }
  std::string describe() const override;
  void clear_cache() override;
  // The two batched products of the last forward, q kᵀ and attn v: 2 · 2 · (B nW) · heads · L² ·
  // head_dim. qkv and proj are Linear children and count themselves.
  int64_t last_forward_flops() const override { return last_flops_; }

  Parameter& relative_position_bias_table() { return param(0); }  // ((2wh-1)(2ww-1), heads)
  Tensor& relative_position_index() { return buffer(0); }         // (L * L) i64, L = wh * ww
  int64_t dim() const { return dim_; }
  int64_t num_heads() const { return heads_; }

 private:
  // Everything one forward decided, which its backward replays.
  struct Geometry {
    int64_t B = 0, H = 0, W = 0, pH = 0, pW = 0, sh = 0, sw = 0, nWh = 0, nWw = 0;
    int64_t windows() const { return nWh * nWw; }
    bool padded() const { return pH != H || pW != W; }
    bool shifted() const { return sh > 0 || sw > 0; }
  };
  Geometry geometry(const Shape& x_shape) const;
  Tensor position_bias(Context& ctx);                             // (heads, L, L) gathered from the table
  const Tensor& attention_mask(Context& ctx, const Geometry& g);  // (nW, 1, L, L): 0 or -100

  int64_t dim_, heads_, head_dim_;
  std::array<int64_t, 2> window_, shift_;
  float scale_;  // head_dim^-1/2
  Geometry g_;   // of the last forward
  Tensor qkv_;   // (3, B nW, heads, L, head_dim): q, k, v of the last forward
  Tensor attn_;  // (B nW, heads, L, L): softmax output of the last forward
  // (nW, 1, L, L) per geometry (pH, pW, sh, sw) seen: kept, not rebuilt over, since a CUDA graph
  // recorded with one geometry's mask reads it at every replay (an evaluation at another image
  // size in between would otherwise free it under the graph).
  std::map<std::array<int64_t, 4>, Tensor> masks_;
  int64_t last_flops_ = 0;
};

}  // namespace dpx::nn
