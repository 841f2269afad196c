// PatchMerging (torchvision.models.swin_transformer.PatchMerging, Swin v1): halves a
// channels-last map's height and width by gathering each 2x2 neighbourhood into 4C channels
// (zero padding odd sizes first), then LayerNorm(4C) and a bias-free Linear(4C -> 2C).
#pragma once
#include "core/rng.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

class PatchMerging : public Cloneable<PatchMerging> {
 public:
  // Children "reduction" Linear(4 dim, 2 dim, bias=False) and "norm" LayerNorm(4 dim),
  // registered in torchvision's order (its state_dict lists reduction first).
  PatchMerging(int64_t dim, Rng& rng);

  Tensor forward(Context& ctx, const Tensor& x) override;  // (B, H, W, C) -> (B, ceil(H/2), ceil(W/2), 2C)
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::string type_name() const override { return "PatchMerging"; }
  std::string describe() const override;
  int64_t dim() const { return dim_; }

 private:
  int64_t dim_;
  Shape x_shape_;  // (B, H, W, C) of the last forward
};

}  // namespace dpx::nn
