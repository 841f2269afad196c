// PatchMerging: pad odd sizes, gather 2x2 neighbourhoods with one permutation (torchvision's
// x0, x1, x2, x3 order), then norm and reduction; backward scatters back through the same view.
#include "layers/patch_merging.hpp"

#include "kernels/ops.hpp"
#include "layers/layer_norm.hpp"
#include "layers/layer_util.hpp"
#include "layers/linear.hpp"

namespace dpx::nn {

namespace {
enum MergingChild : size_t { kReduction, kNorm };
// torchvision concatenates x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2]: block
// k = 2 dw + dh. Seen as (B, H/2, dh, W/2, dw, C), that is the permutation to (B, H/2, W/2, dw, dh, C).
const std::vector<int> kGatherPerm = {0, 1, 3, 4, 2, 5};
}  // namespace

PatchMerging::PatchMerging(int64_t dim, Rng& rng) : dim_(dim) {
  DPX_CHECK(dim > 0, describe(), ": dim must be positive");
  add_module("reduction", std::make_unique<Linear>(4 * dim, 2 * dim, rng, /*bias=*/false));
  add_module("norm", std::make_unique<LayerNorm>(4 * dim));
}

std::string PatchMerging::describe() const { return detail::concat("PatchMerging(dim=", dim_, ")"); }

Tensor PatchMerging::forward(Context& ctx, const Tensor& x) {
  if (x.dim() != 4 || x.size(3) != dim_)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected channels-last (B, H, W, ", dim_, ")");
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2), H2 = (H + 1) / 2, W2 = (W + 1) / 2;
  Tensor padded = x;
  if (H % 2 || W % 2) {
    padded = Tensor::empty({B, 2 * H2, 2 * W2, dim_}, DType::f32, ctx.device);
    ops::pad_hw(ctx, padded, x);
  }
  Tensor gathered = Tensor::empty({B, H2, W2, 2, 2, dim_}, DType::f32, ctx.device);
  ops::permute(ctx, gathered, padded.view({B, H2, 2, W2, 2, dim_}), kGatherPerm);
  x_shape_ = x.shape();
  Tensor h = child(kNorm).forward(ctx, gathered.view({B, H2, W2, 4 * dim_}));
  return child(kReduction).forward(ctx, h);
}

Tensor PatchMerging::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(!x_shape_.empty(), describe(), ": backward called before forward");
  const int64_t B = x_shape_[0], H = x_shape_[1], W = x_shape_[2], H2 = (H + 1) / 2, W2 = (W + 1) / 2;
  if (dy.shape() != Shape{B, H2, W2, 2 * dim_})
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ",
         shape_str({B, H2, W2, 2 * dim_}));
  Tensor dgathered = child(kNorm).backward(ctx, child(kReduction).backward(ctx, dy));
  Tensor dpadded = empty_on(ctx, {B, 2 * H2, 2 * W2, dim_});  // written over: every element once
  Tensor dpadded_view = dpadded.view({B, H2, 2, W2, 2, dim_});
  ops::permute_backward(ctx, dpadded_view, dgathered.view({B, H2, W2, 2, 2, dim_}), kGatherPerm,
                        ops::DxMode::overwrite);
  if (!(H % 2 || W % 2)) return dpadded;
  Tensor dx = zeros_on(ctx, x_shape_);
  ops::pad_hw_backward(ctx, dx, dpadded);
  return dx;
}

}  // namespace dpx::nn
