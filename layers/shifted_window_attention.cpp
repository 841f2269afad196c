// Shifted-window attention: pad, roll and partition into windows (one gather, window_partition),
// multi-head attention with the position bias (and the shift's mask), merge, roll back and crop
// (one gather, window_merge); backward replays it in reverse.
#include "layers/shifted_window_attention.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/ops.hpp"
#include "layers/init.hpp"
#include "layers/layer_util.hpp"
#include "layers/linear.hpp"

namespace dpx::nn {

namespace {
enum AttentionChild : size_t { kQkv, kProj };
// (B nW, L, 3, heads, hd) -> (3, B nW, heads, L, hd): q, k, v and heads to the front.
const std::vector<int> kQkvPerm = {2, 0, 3, 1, 4};
// (B nW, heads, L, hd) -> (B nW, L, heads, hd): heads back beside each other.
const std::vector<int> kHeadsPerm = {0, 2, 1, 3};

// Python's slice bounds: negative counts from the end and clamps at 0; -0 is 0; None is n.
int64_t py_bound(int64_t i, int64_t n) { return i < 0 ? std::max<int64_t>(0, n + i) : std::min(i, n); }
}  // namespace

ShiftedWindowAttention::ShiftedWindowAttention(int64_t dim, std::array<int64_t, 2> window_size,
                                               std::array<int64_t, 2> shift_size, int64_t num_heads, Rng& rng,
                                               bool qkv_bias, bool proj_bias)
    : dim_(dim),
      heads_(num_heads),
      head_dim_(num_heads > 0 ? dim / num_heads : 0),
      window_(window_size),
      shift_(shift_size) {
  if (dim <= 0 || num_heads <= 0 || dim % num_heads != 0)
    fail(describe(), ": dim must be a positive multiple of num_heads");
  if (window_[0] < 1 || window_[1] < 1 || shift_[0] < 0 || shift_[1] < 0 || shift_[0] >= window_[0] ||
      shift_[1] >= window_[1])
    fail(describe(), ": windows must be positive and shifts in [0, window)");
  scale_ = static_cast<float>(std::pow(static_cast<double>(head_dim_), -0.5));
  const int64_t wh = window_[0], ww = window_[1], L = wh * ww;
  Parameter& table = add_parameter("relative_position_bias_table", {(2 * wh - 1) * (2 * ww - 1), heads_});
  init_trunc_normal(table.value, rng, 0.02f);
  // Token (y1, x1) to (y2, x2) reads row (y1 - y2 + wh - 1) (2 ww - 1) + (x1 - x2 + ww - 1).
  Tensor index = Tensor::empty({L * L}, DType::i64);
  int64_t* ip = index.data<int64_t>();
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j)
      ip[i * L + j] = (i / ww - j / ww + wh - 1) * (2 * ww - 1) + (i % ww - j % ww + ww - 1);
  add_buffer("relative_position_index", index);
  add_module("qkv", std::make_unique<Linear>(dim, 3 * dim, rng, qkv_bias));
  add_module("proj", std::make_unique<Linear>(dim, dim, rng, proj_bias));
}

std::string ShiftedWindowAttention::describe() const {
  return detail::concat("ShiftedWindowAttention(dim=", dim_, ", window_size=[", window_[0], ", ", window_[1],
                        "], shift_size=[", shift_[0], ", ", shift_[1], "], num_heads=", heads_, ")");
}

void ShiftedWindowAttention::clear_cache() {
  qkv_ = attn_ = Tensor();
  Module::clear_cache();
}

ShiftedWindowAttention::Geometry ShiftedWindowAttention::geometry(const Shape& s) const {
  if (s.size() != 4 || s[3] != dim_)
    fail(describe(), " given input ", shape_str(s), ": expected channels-last (B, H, W, ", dim_, ")");
  Geometry g;
  g.B = s[0];
  g.H = s[1];
  g.W = s[2];
  g.pH = g.H + (window_[0] - g.H % window_[0]) % window_[0];
  g.pW = g.W + (window_[1] - g.W % window_[1]) % window_[1];
  // As torchvision: no shift along a dimension that one window already covers.
  g.sh = window_[0] >= g.pH ? 0 : shift_[0];
  g.sw = window_[1] >= g.pW ? 0 : shift_[1];
  g.nWh = g.pH / window_[0];
  g.nWw = g.pW / window_[1];
  return g;
}

Tensor ShiftedWindowAttention::position_bias(Context& ctx) {
  const int64_t L = window_[0] * window_[1];
  Tensor gathered = empty_on(ctx, {L * L, heads_});
  ops::index_select(ctx, gathered, relative_position_bias_table().value, relative_position_index());
  Tensor bias = empty_on(ctx, {heads_, L * L});
  ops::permute(ctx, bias, gathered, {1, 0});
  return bias.view({heads_, L, L});
}

// torchvision's mask: label the shifted, padded map with 3 x 3 regions (the same slices,
// assigned in the same order, so overlapping slices resolve alike), then forbid attention
// (-100) between tokens of one window that carry different labels.
const Tensor& ShiftedWindowAttention::attention_mask(Context& ctx, const Geometry& g) {
  const std::array<int64_t, 4> key = {g.pH, g.pW, g.sh, g.sw};
  Tensor& mask = masks_[key];
  if (mask.defined() && mask.device() == ctx.device) return mask;
  const int64_t wh = window_[0], ww = window_[1], L = wh * ww;
  std::vector<int> label(static_cast<size_t>(g.pH * g.pW), 0);
  const int64_t hs[3][2] = {{0, -wh}, {-wh, -g.sh}, {-g.sh, g.pH}},
                ws[3][2] = {{0, -ww}, {-ww, -g.sw}, {-g.sw, g.pW}};
  int count = 0;
  for (const auto& h : hs)
    for (const auto& w : ws) {
      for (int64_t y = py_bound(h[0], g.pH); y < py_bound(h[1], g.pH); ++y)
        for (int64_t x = py_bound(w[0], g.pW); x < py_bound(w[1], g.pW); ++x) label[y * g.pW + x] = count;
      ++count;
    }
  Tensor host = Tensor::empty({g.windows(), 1, L, L});
  float* m = host.data<float>();
  for (int64_t wy = 0; wy < g.nWh; ++wy)
    for (int64_t wx = 0; wx < g.nWw; ++wx)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j) {
          const int li = label[(wy * wh + i / ww) * g.pW + wx * ww + i % ww];
          const int lj = label[(wy * wh + j / ww) * g.pW + wx * ww + j % ww];
          m[((wy * g.nWw + wx) * L + i) * L + j] = li == lj ? 0.f : -100.f;
        }
  mask = host.to(ctx.device);
  return mask;
}

Tensor ShiftedWindowAttention::forward(Context& ctx, const Tensor& x) {
  const Geometry g = geometry(x.shape());
  const int64_t wh = window_[0], ww = window_[1], L = wh * ww, C = dim_, nW = g.windows(), BW = g.B * nW;
  // Padded to whole windows, rolled by the shift and cut into windows: one gather.
  Tensor windows = empty_on(ctx, {g.B, g.nWh, g.nWw, wh, ww, C});
  ops::window_partition(ctx, windows, x, g.sh, g.sw);

  Tensor qkv = child(kQkv).forward(ctx, windows.view({BW, L, C}));  // (B nW, L, 3 C)
  qkv_ = empty_on(ctx, {3, BW, heads_, L, head_dim_});
  ops::permute(ctx, qkv_, qkv.view({BW, L, 3, heads_, head_dim_}), kQkvPerm);
  const Shape head_shape = {BW, heads_, L, head_dim_};
  const Tensor q = qkv_.slice(0, 1).view(head_shape), k = qkv_.slice(1, 2).view(head_shape),
               v = qkv_.slice(2, 3).view(head_shape);
  Tensor scores = empty_on(ctx, {BW, heads_, L, L});
  ops::matmul(ctx, scores, q, k, false, true, scale_);  // (q * scale) k^T, scale folded in
  Tensor bias = position_bias(ctx);
  attn_ = empty_on(ctx, scores.shape());
  if (g.shifted()) {
    Tensor combined = empty_on(ctx, {nW, heads_, L, L});  // mask (nW, 1) + bias (1, heads)
    ops::add_broadcast(ctx, combined, attention_mask(ctx, g), bias.view({1, heads_, L, L}));
    Tensor attn = attn_.view({g.B, nW, heads_, L, L});
    ops::softmax_forward(ctx, attn, scores.view({g.B, nW, heads_, L, L}), &combined);
  } else {
    ops::softmax_forward(ctx, attn_, scores, &bias);
  }
  Tensor heads_out = empty_on(ctx, head_shape);
  ops::matmul(ctx, heads_out, attn_, v, false, false);
  last_flops_ = 2 * 2 * BW * heads_ * L * L * head_dim_;
  Tensor merged = empty_on(ctx, {BW, L, heads_, head_dim_});
  ops::permute(ctx, merged, heads_out, kHeadsPerm);
  Tensor projected = child(kProj).forward(ctx, merged.view({BW, L, C}));

  // The windows joined, rolled back and cropped to (B, H, W, C): one gather.
  Tensor y = empty_on(ctx, x.shape());
  ops::window_merge(ctx, y, projected.view({g.B, g.nWh, g.nWw, wh, ww, C}), g.sh, g.sw, ops::DxMode::overwrite);
  g_ = g;
  return y;
}

Tensor ShiftedWindowAttention::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(qkv_.defined(), describe(), ": backward called before forward");
  const Geometry& g = g_;
  const int64_t wh = window_[0], ww = window_[1], L = wh * ww, C = dim_, nW = g.windows(), BW = g.B * nW;
  if (dy.shape() != Shape{g.B, g.H, g.W, C})
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ",
         shape_str({g.B, g.H, g.W, C}));
  const FreeSaved free_saved(*this);
  // window_merge's backward is the partition of dy (zero where the windows were cropped away).
  Tensor dprojected = empty_on(ctx, {g.B, g.nWh, g.nWw, wh, ww, C});
  ops::window_partition(ctx, dprojected, dy, g.sh, g.sw);
  // Every permute below hits each element of its gradient once: written over, no zero fill first.
  Tensor dmerged = child(kProj).backward(ctx, dprojected.view({BW, L, C}));
  const Shape head_shape = {BW, heads_, L, head_dim_};
  Tensor dheads = empty_on(ctx, head_shape);
  ops::permute_backward(ctx, dheads, dmerged.view({BW, L, heads_, head_dim_}), kHeadsPerm, ops::DxMode::overwrite);

  const Tensor q = qkv_.slice(0, 1).view(head_shape), k = qkv_.slice(1, 2).view(head_shape),
               v = qkv_.slice(2, 3).view(head_shape);
  Tensor dqkv = empty_on(ctx, qkv_.shape());  // every slice is overwritten below
  Tensor dq = dqkv.slice(0, 1).view(head_shape), dk = dqkv.slice(1, 2).view(head_shape),
         dv = dqkv.slice(2, 3).view(head_shape);
  Tensor dattn = empty_on(ctx, attn_.shape());
  ops::matmul(ctx, dattn, dheads, v, false, true);   // dO v^T
  ops::matmul(ctx, dv, attn_, dheads, true, false);  // attn^T dO
  Tensor dscores = empty_on(ctx, attn_.shape());  // written over, not added into
  ops::softmax_backward(ctx, dscores, dattn, attn_, ops::DxMode::overwrite);
  if (Tensor* dtable = grad_target(relative_position_bias_table())) {
    // The bias was added at every window of every image (the mask has no parameters).
    Tensor dbias = zeros_on(ctx, {1, heads_, L, L});
    ops::add_broadcast_backward(ctx, nullptr, &dbias, dscores);
    Tensor dgathered = empty_on(ctx, {L * L, heads_});
    ops::permute_backward(ctx, dgathered, dbias.view({heads_, L * L}), {1, 0}, ops::DxMode::overwrite);
    ops::index_select_backward(ctx, *dtable, dgathered, relative_position_index());
  }
  grad_ready(relative_position_bias_table());
  ops::matmul(ctx, dq, dscores, k, false, false, scale_);  // scale dS k
  ops::matmul(ctx, dk, dscores, q, true, false, scale_);   // scale dS^T q
  Tensor dqkv_rows = empty_on(ctx, {BW, L, 3, heads_, head_dim_});
  ops::permute_backward(ctx, dqkv_rows, dqkv, kQkvPerm, ops::DxMode::overwrite);
  Tensor dwindows = child(kQkv).backward(ctx, dqkv_rows.view({BW, L, 3 * C}));

  // window_partition's backward: the windows' gradient merged back (the padding's dropped).
  Tensor dx = empty_on(ctx, {g.B, g.H, g.W, C});
  ops::window_merge(ctx, dx, dwindows.view({g.B, g.nWh, g.nWw, wh, ww, C}), g.sh, g.sw, ops::DxMode::overwrite);
  return dx;
}

}  // namespace dpx::nn
