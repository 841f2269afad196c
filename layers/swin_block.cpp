// SwinTransformerBlock: two residual branches (attention, MLP), each behind LayerNorm and
// stochastic depth with a draw of its own; backward joins each branch with its skip path.
#include "layers/swin_block.hpp"

#include "layers/activation.hpp"
#include "layers/dropout.hpp"
#include "layers/init.hpp"
#include "layers/layer_norm.hpp"
#include "layers/layer_util.hpp"
#include "layers/linear.hpp"
#include "layers/residual.hpp"
#include "layers/sequential.hpp"
#include "layers/shifted_window_attention.hpp"
#include "layers/stochastic_depth.hpp"

namespace dpx::nn {

namespace {
enum BlockChild : size_t { kNorm1, kAttn, kStochasticDepth, kNorm2, kMlp };
}

SwinTransformerBlock::SwinTransformerBlock(int64_t dim, int64_t num_heads, std::array<int64_t, 2> window_size,
                                           std::array<int64_t, 2> shift_size, Rng& rng, double mlp_ratio,
                                           float stochastic_depth_prob)
    : dim_(dim) {
  const auto hidden = static_cast<int64_t>(static_cast<double>(dim) * mlp_ratio);
  if (hidden < 1) fail(describe(), ": dim * mlp_ratio (", mlp_ratio, ") must be at least 1");
  add_module("norm1", std::make_unique<LayerNorm>(dim));
  add_module("attn", std::make_unique<ShiftedWindowAttention>(dim, window_size, shift_size, num_heads, rng));
  add_module("stochastic_depth", std::make_unique<StochasticDepth>(stochastic_depth_prob, "row", rng));
  add_module("norm2", std::make_unique<LayerNorm>(dim));
  // torchvision.ops.MLP(dim, [hidden, dim], activation_layer=GELU, dropout=0): the Dropout
  // layers hold no state but keep the children's indices, hence the names mlp.0 and mlp.3.
  auto mlp = std::make_unique<Sequential>();
  auto& fc1 = mlp->emplace<Linear>(dim, hidden, rng);
  mlp->emplace<GELU>();
  mlp->emplace<Dropout>(0.f, rng);
  auto& fc2 = mlp->emplace<Linear>(hidden, dim, rng);
  mlp->emplace<Dropout>(0.f, rng);
  for (Linear* fc : {&fc1, &fc2}) {
    init_xavier_uniform(fc->weight().value, rng);
    init_normal(fc->bias()->value, rng, 0.f, 1e-6f);
  }
  add_module("mlp", std::move(mlp));
}

std::string SwinTransformerBlock::describe() const {
  return detail::concat("SwinTransformerBlock(dim=", dim_, ")");
}

void SwinTransformerBlock::clear_cache() {
  attn_noise_ = mlp_noise_ = Tensor();
  forwarded_ = false;
  Module::clear_cache();
}

Tensor SwinTransformerBlock::forward(Context& ctx, const Tensor& x) {
  if (x.dim() != 4 || x.size(3) != dim_)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected channels-last (B, H, W, ", dim_, ")");
  auto& depth = child<StochasticDepth>(kStochasticDepth);
  Tensor a = child(kAttn).forward(ctx, child(kNorm1).forward(ctx, x));
  Tensor x1 = residual_add(ctx, x, depth.apply(ctx, a, attn_noise_), describe());
  Tensor m = child(kMlp).forward(ctx, child(kNorm2).forward(ctx, x1));
  forwarded_ = true;
  return residual_add(ctx, x1, depth.apply(ctx, m, mlp_noise_), describe());
}

Tensor SwinTransformerBlock::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(forwarded_, describe(), ": backward called before forward");
  const FreeSaved free_saved(*this);
  const auto& depth = child<StochasticDepth>(kStochasticDepth);
  Tensor dm = depth.apply_backward(ctx, dy, mlp_noise_);
  Tensor dx1 = residual_backward(ctx, child(kNorm2).backward(ctx, child(kMlp).backward(ctx, dm)), dy);
  Tensor da = depth.apply_backward(ctx, dx1, attn_noise_);
  // The second join: norm1's dx added into dx1 (a tensor of the block's own) by the op itself.
  child(kNorm1).backward_add(ctx, child(kAttn).backward(ctx, da), dx1);
  return dx1;
}

}  // namespace dpx::nn
