// Tests of the CPU layout kernels: permute (and its backward, the inverse permutation), roll
// over H and W as torch.roll, bottom/right zero padding and its crop-like backward, concatenation
// along channels and its split, and the index gather with its scatter-add.
#include <doctest/doctest.h>

#include <numeric>

#include "kernels/ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;
using dpx::testing::randn;

namespace {
Tensor iota(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.f);
  return Tensor::from(shape, v);
}
std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
}  // namespace

TEST_CASE("permute: a transpose by hand, and Swin's window partition against index arithmetic") {
  Context ctx = Context::cpu();
  Tensor x = iota({2, 3}), t = Tensor::empty({3, 2});
  ops::permute(ctx, t, x, {1, 0});
  check_close(t, {0, 3, 1, 4, 2, 5});
  // (B, nH, wh, nW, ww, C) -> (B, nH, nW, wh, ww, C), B 2, 3x2 windows of 2x3, C 4.
  const Shape in_shape = {2, 3, 2, 2, 3, 4};
  Tensor in = iota(in_shape), out = Tensor::empty({2, 3, 2, 2, 3, 4});
  ops::permute(ctx, out, in, {0, 1, 3, 2, 4, 5});
  auto o = out.to_vector();
  int64_t i = 0;
  bool all = true;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t w = 0; w < 2; ++w)
        for (int64_t y = 0; y < 2; ++y)
          for (int64_t x2 = 0; x2 < 3; ++x2)
            for (int64_t c = 0; c < 4; ++c, ++i)
              all = all && o[i] == float((((b * 3 + h) * 2 + y) * 2 + w) * 12 + x2 * 4 + c);
  CHECK(all);
  // The backward adds the inverse permutation: permuting back gives the input again.
  Tensor back = Tensor::from(in_shape, std::vector<float>(in.numel(), 1.f));
  ops::permute_backward(ctx, back, out, {0, 1, 3, 2, 4, 5}, ops::DxMode::add);
  auto bv = back.to_vector(), iv = in.to_vector();
  for (size_t k = 0; k < bv.size(); ++k) bv[k] -= 1.f;
  CHECK(bv == iv);
}

TEST_CASE("permute: attention's (2, 0, 3, 1, 4) on 5 dimensions, 1 and 2 threads, errors") {
  Tensor qkv = randn({16, 49, 3, 4, 32}, 1);
  auto run = [&](int threads) {
    Context ctx = Context::cpu(threads);
    Tensor out = Tensor::empty({3, 16, 4, 49, 32});
    ops::permute(ctx, out, qkv, {2, 0, 3, 1, 4});
    return out;
  };
  Tensor one = run(1), two = run(2);
  CHECK(bitwise_equal(one, two));
  // out[s, b, h, l, d] = in[b, l, s, h, d]
  auto o = one.to_vector(), v = qkv.to_vector();
  CHECK(o[(((2 * 16 + 5) * 4 + 3) * 49 + 7) * 32 + 9] == v[(((5 * 49 + 7) * 3 + 2) * 4 + 3) * 32 + 9]);
  Context ctx = Context::cpu();
  Tensor bad = Tensor::empty({3, 16, 4, 49, 31});
  CHECK_THROWS_WITH_AS(ops::permute(ctx, bad, qkv, {2, 0, 3, 1, 4}),
                       doctest::Contains("out has shape (3, 16, 4, 49, 31), but in (16, 49, 3, 4, 32) "
                                         "permuted by (2, 0, 3, 1, 4) is (3, 16, 4, 49, 32)"),
                       Error);
  CHECK_THROWS_WITH_AS(ops::permute(ctx, bad, qkv, {2, 0, 3, 1, 1}),
                       doctest::Contains("is not a permutation"), Error);
}

TEST_CASE("roll: torch.roll over dims 1 and 2, negative and oversized shifts, and backward") {
  Context ctx = Context::cpu();
  // (1, 3, 4, 1): torch.roll(x, (1, -1), (1, 2)) of arange(12).view(1, 3, 4, 1).
  Tensor x = iota({1, 3, 4, 1}), y = Tensor::empty({1, 3, 4, 1});
  ops::roll(ctx, y, x, 1, -1);
  check_close(y, {9, 10, 11, 8, 1, 2, 3, 0, 5, 6, 7, 4});
  ops::roll(ctx, y, x, 1 + 3 * 5, -1 - 4 * 2);  // whole turns change nothing
  check_close(y, {9, 10, 11, 8, 1, 2, 3, 0, 5, 6, 7, 4});
  // Rolling back undoes it, and the backward adds.
  Tensor back = Tensor::from({1, 3, 4, 1}, std::vector<float>(12, 100.f));
  ops::roll_backward(ctx, back, y, 1, -1);
  check_close(back, {100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111});
  // Channels move together: (2, 2, 3, 2).
  Tensor c = iota({2, 2, 3, 2}), cy = Tensor::empty({2, 2, 3, 2});
  ops::roll(ctx, cy, c, 0, 1);
  check_close(cy, {4, 5, 0, 1, 2, 3, 10, 11, 6, 7, 8, 9, 16, 17, 12, 13, 14, 15, 22, 23, 18, 19, 20, 21});
}

TEST_CASE("pad_hw: zeros at the bottom and right; the backward crops and adds") {
  Context ctx = Context::cpu();
  Tensor x = iota({1, 2, 2, 2}), y = Tensor::empty({1, 3, 4, 2});
  ops::pad_hw(ctx, y, x);
  check_close(y, {0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  Tensor dy = iota({1, 3, 4, 2}), dx = Tensor::from({1, 2, 2, 2}, std::vector<float>(8, 1.f));
  ops::pad_hw_backward(ctx, dx, dy);
  check_close(dx, {1, 2, 3, 4, 9, 10, 11, 12});
  Tensor small = Tensor::empty({1, 1, 4, 2});
  CHECK_THROWS_WITH_AS(ops::pad_hw(ctx, small, x),
                       doctest::Contains("pad_hw: out (1, 1, 4, 2) must be in (1, 2, 2, 2) padded"), Error);
}

TEST_CASE("concat_channels and split_channels_backward") {
  Context ctx = Context::cpu(2);
  Tensor a = iota({2, 1, 2, 2}), b = randn({2, 3, 2, 2}, 7);
  Tensor out = Tensor::empty({2, 4, 2, 2});
  ops::concat_channels(ctx, out, {a, b});
  auto o = out.to_vector(), av = a.to_vector(), bv = b.to_vector();
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k) {
      CHECK(o[n * 16 + k] == av[n * 4 + k]);
      for (int c = 0; c < 3; ++c) CHECK(o[n * 16 + 4 + c * 4 + k] == bv[n * 12 + c * 4 + k]);
    }
  Tensor da = Tensor::from({2, 1, 2, 2}, std::vector<float>(8, 1.f)), db = Tensor::zeros({2, 3, 2, 2});
  ops::split_channels_backward(ctx, {&da, &db}, out);
  std::vector<double> want_a;
  for (float v : av) want_a.push_back(v + 1.0);
  check_close(da, want_a);
  check_close(db, as_double(bv));
  Tensor wrong = Tensor::empty({2, 5, 2, 2});
  CHECK_THROWS_WITH_AS(ops::concat_channels(ctx, wrong, {a, b}),
                       doctest::Contains("the inputs have 4 channels in all, out (2, 5, 2, 2) has 5"), Error);
  CHECK_THROWS_WITH_AS(ops::split_channels_backward(ctx, {&da, nullptr}, out),
                       doctest::Contains("dinput 1 is null"), Error);
  // One gradient for an input concatenated twice: the parallel sums would race on it.
  Tensor twice = Tensor::zeros({2, 2, 2, 2}), wide = Tensor::zeros({2, 4, 2, 2});
  CHECK_THROWS_WITH_AS(ops::split_channels_backward(ctx, {&twice, &twice}, wide),
                       doctest::Contains("dinputs 0 and 1 share memory"), Error);
}

TEST_CASE("copy_channels: a block of channels into another tensor, written over or added; refusals") {
  Context ctx = Context::cpu(2);
  Tensor src = iota({2, 3, 2, 2});  // 0..23
  Tensor dst = Tensor::from({2, 4, 2, 2}, std::vector<float>(32, 100.f));
  ops::copy_channels(ctx, dst, 1, src, 1, 2, ops::DxMode::overwrite);  // src channels 1, 2 to dst's 1, 2
  auto d = dst.to_vector(), x = src.to_vector();
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 4; ++k)
        CHECK(d[n * 16 + c * 4 + k] == (c == 1 || c == 2 ? x[n * 12 + c * 4 + k] : 100.f));
  ops::copy_channels(ctx, dst, 3, src, 0, 1, ops::DxMode::add);  // src channel 0 onto dst's 3
  d = dst.to_vector();
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k) CHECK(d[n * 16 + 12 + k] == 100.f + x[n * 12 + k]);
  ops::copy_channels(ctx, dst, 4, src, 3, 0, ops::DxMode::add);  // none at the end: nothing to do
  CHECK(dst.to_vector() == d);
  CHECK_THROWS_WITH_AS(ops::copy_channels(ctx, dst, 3, src, 0, 2, ops::DxMode::add),
                       doctest::Contains("channels [0, 2) of src (2, 3, 2, 2) to [3, 5) of dst (2, 4, 2, 2): out of "
                                         "their channels"),
                       Error);
  Tensor other = Tensor::empty({2, 3, 2, 3});
  CHECK_THROWS_WITH_AS(ops::copy_channels(ctx, dst, 0, other, 0, 1, ops::DxMode::add),
                       doctest::Contains("does not fit dst (2, 4, 2, 2)"), Error);
  CHECK_THROWS_WITH_AS(ops::copy_channels(ctx, dst, 0, dst, 2, 1, ops::DxMode::add),
                       doctest::Contains("dst and src share memory"), Error);
}

TEST_CASE("index_select and its scatter-add backward (repeated indices add up)") {
  Context ctx = Context::cpu();
  Tensor table = iota({4, 2});
  Tensor index = Tensor::empty({5}, DType::i64);
  const int64_t idx[] = {3, 0, 3, 1, 3};
  std::copy(idx, idx + 5, index.data<int64_t>());
  Tensor out = Tensor::empty({5, 2});
  ops::index_select(ctx, out, table, index);
  check_close(out, {6, 7, 0, 1, 6, 7, 2, 3, 6, 7});
  Tensor dtable = Tensor::from({4, 2}, std::vector<float>(8, 1.f));
  ops::index_select_backward(ctx, dtable, Tensor::from({5, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), index);
  check_close(dtable, {4, 5, 8, 9, 1, 1, 16, 19});
  index.data<int64_t>()[2] = 4;
  CHECK_THROWS_WITH_AS(ops::index_select(ctx, out, table, index),
                       doctest::Contains("index_select: index[2] = 4 is outside the 4 rows of table (4, 2)"),
                       Error);
}

namespace {
struct WindowCase {
  int64_t B, H, W, C, wh, ww, sh, sw;
};
// Swin's windows by the three copies the ops replace: pad to whole windows, roll by the negative
// shift, permute rows into windows (reference kernels, each tested above).
Tensor windows_by_copies(Context& ref, const Tensor& x, const WindowCase& k) {
  const int64_t nH = (k.H + k.wh - 1) / k.wh, nW = (k.W + k.ww - 1) / k.ww;
  Tensor padded = Tensor::empty({k.B, nH * k.wh, nW * k.ww, k.C}), rolled = Tensor::empty(padded.shape());
  ops::pad_hw(ref, padded, x);
  ops::roll(ref, rolled, padded, -k.sh, -k.sw);
  Tensor windows = Tensor::empty({k.B, nH, nW, k.wh, k.ww, k.C});
  ops::permute(ref, windows, rolled.view({k.B, nH, k.wh, nW, k.ww, k.C}), {0, 1, 3, 2, 4, 5});
  return windows;
}
Tensor sevens(const Shape& s) { return Tensor::from(s, std::vector<float>(static_cast<size_t>(shape_numel(s)), 7.f)); }
// And back: permute windows into rows, roll by the shift, crop.
Tensor merged_by_copies(Context& ref, const Tensor& windows, const WindowCase& k) {
  const int64_t nH = windows.size(1), nW = windows.size(2);
  Tensor rows = Tensor::empty({k.B, nH, k.wh, nW, k.ww, k.C});
  ops::permute(ref, rows, windows, {0, 1, 3, 2, 4, 5});
  Tensor rolled = Tensor::empty({k.B, nH * k.wh, nW * k.ww, k.C});
  ops::roll(ref, rolled, rows.view(rolled.shape()), k.sh, k.sw);
  Tensor y = Tensor::zeros({k.B, k.H, k.W, k.C});
  ops::pad_hw_backward(ref, y, rolled);
  return y;
}
}  // namespace

TEST_CASE("window_partition and window_merge equal pad + roll + permute and back, on every backend") {
  Context ref = Context::ref();
  const WindowCase cases[] = {
      {2, 8, 8, 4, 4, 4, 0, 0},    // whole windows, no shift
      {2, 8, 8, 4, 4, 4, 2, 2},    // Swin's shifted block
      {1, 7, 10, 3, 4, 3, 2, 1},   // padded along both, odd C, non-square windows
      {3, 5, 5, 8, 7, 7, 0, 0},    // one window larger than the map
      {1, 6, 6, 2, 3, 3, -1, 7},   // negative and over-long shifts wrap
  };
  for (const WindowCase& k : cases) {
    CAPTURE(k.H);
    CAPTURE(k.W);
    CAPTURE(k.sh);
    CAPTURE(k.sw);
    const Tensor x = randn({k.B, k.H, k.W, k.C}, 40);
    const Tensor want = windows_by_copies(ref, x, k);
    const Tensor dwin = randn(want.shape(), 41), y0 = randn(x.shape(), 42);
    const Tensor want_merged = merged_by_copies(ref, dwin, k);
    for (Context ctx : {Context::ref(), Context::cpu(1), Context::cpu(3)}) {
      Tensor windows = sevens(want.shape());  // every element written, padding included
      ops::window_partition(ctx, windows, x, k.sh, k.sw);
      CHECK(bitwise_equal(windows, want));
      Tensor y = sevens(x.shape());
      ops::window_merge(ctx, y, dwin, k.sh, k.sw, ops::DxMode::overwrite);
      CHECK(bitwise_equal(y, want_merged));
      Tensor acc = y0.clone();  // add: the partition's gradient accumulated
      ops::window_merge(ctx, acc, dwin, k.sh, k.sw, ops::DxMode::add);
      const auto a = acc.to_vector(), base = y0.to_vector(), m = want_merged.to_vector();
      bool sums = true;
      for (size_t i = 0; i < a.size(); ++i) sums = sums && a[i] == base[i] + m[i];
      CHECK(sums);
    }
    // Each is the other's backward: <partition(x), w> == <x, merge(w)>.
    Tensor merged = Tensor::empty(x.shape());
    ops::window_merge(ref, merged, dwin, k.sh, k.sw, ops::DxMode::overwrite);
    double lhs = 0, rhs = 0;
    const auto wv = want.to_vector(), dv = dwin.to_vector(), xv = x.to_vector(), mv = merged.to_vector();
    for (size_t i = 0; i < wv.size(); ++i) lhs += double(wv[i]) * dv[i];
    for (size_t i = 0; i < xv.size(); ++i) rhs += double(xv[i]) * mv[i];
    CHECK(lhs == doctest::Approx(rhs).epsilon(1e-9));
  }
  Context ctx = Context::cpu();
  Tensor x = randn({1, 9, 8, 4}, 43), small = Tensor::empty({1, 2, 2, 4, 4, 4});
  CHECK_THROWS_WITH_AS(ops::window_partition(ctx, small, x, 0, 0),
                       doctest::Contains("window_partition: windows (1, 2, 2, 4, 4, 4) (B, nH, nW, wh, ww, C) must "
                                         "cover x (1, 9, 8, 4)"),
                       Error);
  // An empty map under windows that cover more than it: every window is padding, zeros.
  Tensor empty = Tensor::empty({1, 0, 5, 4}), cover = Tensor::from({1, 1, 1, 3, 5, 4}, std::vector<float>(60, 7.f));
  ops::window_partition(ctx, cover, empty, 0, 0);
  for (float v : cover.to_vector()) CHECK(v == 0.f);
}
