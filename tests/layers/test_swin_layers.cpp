// Swin's composite layers: ShiftedWindowAttention (plain, shifted, padded, rectangular windows),
// PatchMerging (even and odd sizes) and SwinTransformerBlock, each by finite differences over
// the input and every parameter; plus torchvision's position index and names.
#include <doctest/doctest.h>

#include <cmath>

#include "layers/patch_merging.hpp"
#include "layers/shifted_window_attention.hpp"
#include "layers/swin_block.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {
std::vector<std::string> names(nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(name);
  for (auto& [name, b] : m.named_buffers()) out.push_back(name);
  return out;
}
}  // namespace

TEST_CASE("ShiftedWindowAttention: torchvision's position index, names and shapes") {
  Rng rng(1);
  nn::ShiftedWindowAttention attn(4, {2, 3}, {1, 1}, 2, rng);
  CHECK(attn.relative_position_bias_table().value.shape() == Shape{15, 2});
  // torchvision.models.swin_transformer.ShiftedWindowAttention(4, [2, 3], [1, 1], 2).relative_position_index
  const std::vector<int64_t> want = {7,  6,  5,  2, 1, 0, 8,  7,  6,  3, 2, 1, 9,  8,  7,  4, 3, 2,
                                     12, 11, 10, 7, 6, 5, 13, 12, 11, 8, 7, 6, 14, 13, 12, 9, 8, 7};
  const Tensor& index = attn.relative_position_index();
  CHECK(index.dtype() == DType::i64);
  CHECK(std::vector<int64_t>(index.data<int64_t>(), index.data<int64_t>() + index.numel()) == want);
  CHECK(names(attn) == std::vector<std::string>{"relative_position_bias_table", "qkv.weight", "qkv.bias",
                                                "proj.weight", "proj.bias", "relative_position_index"});
  CHECK(attn.describe() ==
        "ShiftedWindowAttention(dim=4, window_size=[2, 3], shift_size=[1, 1], num_heads=2)");
  CHECK_THROWS_WITH_AS(nn::ShiftedWindowAttention(6, {2, 2}, {0, 0}, 4, rng),
                       doctest::Contains("multiple of num_heads"), Error);
  CHECK_THROWS_WITH_AS(nn::ShiftedWindowAttention(4, {2, 2}, {2, 0}, 2, rng),
                       doctest::Contains("shifts in [0, window)"), Error);
  Context ctx = Context::cpu();
  // FLOPs of the two attention products (qkv and proj count themselves): a (2, 5, 7) map is
  // padded to (6, 9), 3 x 3 windows of L = 6 tokens, 2 heads of dimension 2.
  attn.forward(ctx, Tensor::zeros({2, 5, 7, 4}));
  CHECK(attn.last_forward_flops() == 2 * 2 * (2 * 9) * 2 * 6 * 6 * 2);
  CHECK_THROWS_WITH_AS(attn.forward(ctx, Tensor::zeros({1, 4, 4, 5})),
                       doctest::Contains("given input (1, 4, 4, 5): expected channels-last (B, H, W, 4)"),
                       Error);
}

TEST_CASE("ShiftedWindowAttention: gradients, with and without shift and padding") {
  Context ctx = Context::cpu();
  Rng rng(2);
  SUBCASE("plain windows, 2 images") {
    nn::ShiftedWindowAttention attn(4, {2, 2}, {0, 0}, 2, rng);
    CHECK_GRADIENTS(ctx, attn, uniform({2, 4, 4, 4}, 20));
  }
  SUBCASE("shifted windows and the attention mask") {
    nn::ShiftedWindowAttention attn(4, {2, 2}, {1, 1}, 2, rng);
    CHECK_GRADIENTS(ctx, attn, uniform({1, 4, 4, 4}, 21));
  }
  SUBCASE("shifted and padded: 3 x 5 map in 2 x 2 windows") {
    nn::ShiftedWindowAttention attn(4, {2, 2}, {1, 1}, 2, rng);
    Tensor y = attn.forward(ctx, uniform({1, 3, 5, 4}, 22));
    CHECK(y.shape() == Shape{1, 3, 5, 4});
    CHECK_GRADIENTS(ctx, attn, uniform({1, 3, 5, 4}, 22));
  }
  SUBCASE("rectangular 2 x 3 windows, shifted and padded, 3 heads") {
    nn::ShiftedWindowAttention attn(6, {2, 3}, {1, 1}, 3, rng);
    CHECK_GRADIENTS(ctx, attn, uniform({1, 3, 4, 6}, 23));
  }
}

TEST_CASE("ShiftedWindowAttention: no shift along a dimension one window covers (as torchvision)") {
  Context ctx = Context::cpu();
  Rng rng(3);
  nn::ShiftedWindowAttention shifted(4, {3, 3}, {1, 1}, 2, rng);
  Rng same(3);
  nn::ShiftedWindowAttention plain(4, {3, 3}, {0, 0}, 2, same);
  // A 2 x 3 map pads to one 3 x 3 window: both shifts drop, so the outputs agree.
  Tensor x = uniform({2, 2, 3, 4}, 24);
  CHECK(shifted.forward(ctx, x).to_vector() == plain.forward(ctx, x).to_vector());
  // A 2 x 7 map pads to 3 x 9: only the width is shifted, and the outputs differ.
  Tensor wide = uniform({1, 2, 7, 4}, 25);
  CHECK(shifted.forward(ctx, wide).to_vector() != plain.forward(ctx, wide).to_vector());
  CHECK_GRADIENTS(ctx, shifted, wide);
}

TEST_CASE("PatchMerging: gradients for even and odd sizes; torchvision's names and shapes") {
  Context ctx = Context::cpu();
  Rng rng(4);
  nn::PatchMerging merge(3, rng);
  CHECK(names(merge) == std::vector<std::string>{"reduction.weight", "norm.weight", "norm.bias"});
  CHECK(merge.forward(ctx, Tensor::zeros({2, 5, 3, 3})).shape() == Shape{2, 3, 2, 6});
  CHECK_GRADIENTS(ctx, merge, uniform({1, 4, 4, 3}, 30));
  CHECK_GRADIENTS(ctx, merge, uniform({2, 3, 5, 3}, 31));
  CHECK_THROWS_WITH_AS(merge.forward(ctx, Tensor::zeros({1, 3, 4, 4})),
                       doctest::Contains("PatchMerging(dim=3) given input (1, 3, 4, 4)"), Error);
}

TEST_CASE("PatchMerging: 2x2 neighbourhoods in torchvision's order x00, x10, x01, x11") {
  Context ctx = Context::cpu();
  Rng rng(5);
  nn::PatchMerging merge(1, rng);
  // The reduction weight (2, 4) picks gathered block 1 (x[1::2, 0::2]) for output 0 and block 2
  // (x[0::2, 1::2]) for output 1, after the LayerNorm over the 4 gathered values.
  merge.named_parameters()[0].second->value.copy_from(Tensor::from({2, 4}, {0, 1, 0, 0, 0, 0, 1, 0}));
  Tensor x = Tensor::from({1, 2, 2, 1}, {0, 1, 2, 4});  // x00 = 0, x01 = 1, x10 = 2, x11 = 4
  auto y = merge.forward(ctx, x).to_vector();
  // Gathered in torchvision's order the values are 0, 2, 1, 4.
  const double mean = 7.0 / 4, var = (0 + 4 + 1 + 16) / 4.0 - mean * mean, rstd = 1 / std::sqrt(var + 1e-5);
  CHECK(y[0] == doctest::Approx((2 - mean) * rstd).epsilon(1e-5));
  CHECK(y[1] == doctest::Approx((1 - mean) * rstd).epsilon(1e-5));
}

TEST_CASE("SwinTransformerBlock: gradients with shifted windows, padding and stochastic depth") {
  Context ctx = Context::cpu();
  Rng rng(6);
  nn::SwinTransformerBlock block(4, 2, {2, 2}, {1, 1}, rng, /*mlp_ratio=*/2.0,
                                 /*stochastic_depth_prob=*/0.5f);
  CHECK(names(block) ==
        std::vector<std::string>{"norm1.weight", "norm1.bias", "attn.relative_position_bias_table",
                                 "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
                                 "norm2.weight", "norm2.bias", "mlp.0.weight", "mlp.0.bias", "mlp.3.weight",
                                 "mlp.3.bias", "attn.relative_position_index"});
  Tensor x = uniform({3, 3, 3, 4}, 40);
  CHECK_GRADIENTS(ctx, block, x);
  GradCheckOptions fine;
  fine.eps = 3e-3f;
  CHECK_GRADIENTS(ctx, block, x, fine);
  block.eval();
  CHECK_GRADIENTS(ctx, block, x);
  // The second join's backward is norm1's own DxMode::add: one axpy, for the first join.
  auto m = block.clone();
  const Tensor y = m->forward(ctx, x);
  const auto calls = op_calls([&] { m->backward(ctx, uniform(y.shape(), 41)); });
  CHECK(calls.at("axpy") == 1);
  CHECK(calls.at("layer_norm_backward") == 2);
}
