// GPU tests of layer norm, softmax (with a broadcast bias), permute, roll, pad, channel concat
// and index_select, forward and accumulating backward, against the CPU ops. The GPU side calls
// dpx::cuda:: directly, so these run whether or not kernels/ops.cpp dispatches them to CUDA yet.
#include <doctest/doctest.h>

#include <vector>

#include "kernels/cuda/cuda_ops.hpp"
#include "tests/cuda/gpu_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

TEST_CASE("cuda layer_norm forward and backward match the reference") {
  Context c = reference(), g = gpu();
  uint64_t seed = 1;
  for (Shape xs : {Shape{3, 49, 96}, Shape{5, 7}, Shape{1000, 37}, Shape{2, 1031}}) {
    CAPTURE(shape_str(xs));
    const int64_t D = xs.back(), rows = shape_numel(xs) / D;
    Tensor x = uniform(xs, ++seed, 1.f, 3.f), gamma = uniform({D}, ++seed), beta = uniform({D}, ++seed);
    Tensor gx = x.to(dev()), ggamma = gamma.to(dev()), gbeta = beta.to(dev());
    Tensor y = Tensor::empty(xs), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
    Tensor gy = poisoned(xs, dev()), gmean = poisoned({rows}, dev()), grstd = poisoned({rows}, dev());
    ops::layer_norm_forward(c, y, mean, rstd, x, gamma, beta, 1e-5f);
    cuda::layer_norm_forward(g, gy, gmean, grstd, gx, ggamma, gbeta, 1e-5f);
    check_close(gmean, mean, 1e-6);
    check_close(grstd, rstd, 1e-5);
    check_close(gy, y, 1e-5);
    Tensor dy = uniform(xs, ++seed), dx0 = uniform(xs, ++seed), dg0 = uniform({D}, ++seed), db0 = uniform({D}, ++seed);
    Tensor dx = dx0.clone(), dg = dg0.clone(), db = db0.clone();
    Tensor gdx = dx0.to(dev()), gdg = dg0.to(dev()), gdb = db0.to(dev()), gdy = dy.to(dev());
    ops::layer_norm_backward(c, &dx, &dg, &db, dy, x, gamma, mean, rstd, ops::DxMode::add);
    cuda::layer_norm_backward(g, &gdx, &gdg, &gdb, gdy, gx, ggamma, gmean, grstd, ops::DxMode::add);
    CHECK(norm_rel_diff(gdx, dx) <= 1e-5);  // per-row means of dy subtracted: norm-wise
    CHECK(norm_rel_diff(gdg, dg) <= 1e-5);
    CHECK(norm_rel_diff(gdb, db) <= 1e-5);
    ops::layer_norm_backward(c, nullptr, nullptr, &db, dy, x, gamma, mean, rstd, ops::DxMode::add);
    cuda::layer_norm_backward(g, nullptr, nullptr, &gdb, gdy, gx, ggamma, gmean, grstd, ops::DxMode::add);
    CHECK(norm_rel_diff(gdb, db) <= 1e-5);
    Tensor over = Tensor::empty(xs), gover = poisoned(xs, dev());  // written over: NaN gone
    ops::layer_norm_backward(c, &over, nullptr, nullptr, dy, x, gamma, mean, rstd, ops::DxMode::overwrite);
    cuda::layer_norm_backward(g, &gover, nullptr, nullptr, gdy, gx, ggamma, gmean, grstd, ops::DxMode::overwrite);
    CHECK(norm_rel_diff(gover, over) <= 1e-5);
  }
}

TEST_CASE("cuda softmax with and without a broadcast bias, and its backward, match the reference") {
  Context c = reference(), g = gpu();
  const Shape xs{6, 3, 49, 49};  // (windows * batch, heads, L, L)
  Tensor x = uniform(xs, 20, -5.f, 5.f), bias = uniform({3, 49, 49}, 21, -2.f, 2.f);
  Tensor gx = x.to(dev()), gbias = bias.to(dev());
  for (bool with_bias : {false, true}) {
    CAPTURE(with_bias);
    Tensor y = Tensor::empty(xs), gy = poisoned(xs, dev());
    ops::softmax_forward(c, y, x, with_bias ? &bias : nullptr);
    cuda::softmax_forward(g, gy, gx, with_bias ? &gbias : nullptr);
    check_close(gy, y, 1e-6);
    Tensor dy = uniform(xs, 22), dx0 = uniform(xs, 23);
    Tensor dx = dx0.clone(), gdx = dx0.to(dev());
    ops::softmax_backward(c, dx, dy, y, ops::DxMode::add);
    cuda::softmax_backward(g, gdx, dy.to(dev()), gy, ops::DxMode::add);
    check_close(gdx, dx, 1e-5);
    Tensor over = Tensor::empty(xs), gover = poisoned(xs, dev());  // written over: NaN gone
    ops::softmax_backward(c, over, dy, y, ops::DxMode::overwrite);
    cuda::softmax_backward(g, gover, dy.to(dev()), gy, ops::DxMode::overwrite);
    check_close(gover, over, 1e-5);
  }
  Tensor long_rows = uniform({3, 1000}, 24), y = Tensor::empty({3, 1000}), gy = poisoned({3, 1000}, dev());
  ops::softmax_forward(c, y, long_rows, nullptr);
  cuda::softmax_forward(g, gy, long_rows.to(dev()), nullptr);
  check_close(gy, y, 1e-6);
}

TEST_CASE("cuda permute, roll and pad_hw with their backward match the reference") {
  Context c = reference(), g = gpu();
  Tensor x = uniform({2, 3, 5, 7, 4}, 30);
  Tensor gx = x.to(dev());
  for (std::vector<int> perm : {std::vector<int>{0, 2, 1, 3, 4}, {4, 3, 2, 1, 0}, {0, 1, 2, 3, 4}, {1, 0, 3, 2, 4}}) {
    Shape ps;
    for (int d : perm) ps.push_back(x.size(d));
    Tensor out = Tensor::empty(ps), gout = poisoned(ps, dev());
    ops::permute(c, out, x, perm);
    cuda::permute(g, gout, gx, perm);
    CHECK(bitwise_equal(gout, out));
    Tensor dout = uniform(ps, 31), din0 = uniform(x.shape(), 32);
    for (ops::DxMode mode : {ops::DxMode::add, ops::DxMode::overwrite}) {
      Tensor din = din0.clone(), gdin = mode == ops::DxMode::add ? din0.to(dev()) : poisoned(x.shape(), dev());
      ops::permute_backward(c, din, dout, perm, mode);
      cuda::permute_backward(g, gdin, dout.to(dev()), perm, mode);
      CHECK(bitwise_equal(gdin, din));
    }
  }
  Tensor m = uniform({3, 9, 11, 5}, 33), gm = m.to(dev());
  for (auto [sh, sw] : {std::pair<int64_t, int64_t>{-3, -3}, {3, 3}, {0, 0}, {20, -13}}) {
    CAPTURE(sh);
    CAPTURE(sw);
    Tensor out = Tensor::empty(m.shape()), gout = poisoned(m.shape(), dev());
    ops::roll(c, out, m, sh, sw);
    cuda::roll(g, gout, gm, sh, sw);
    CHECK(bitwise_equal(gout, out));
    Tensor dout = uniform(m.shape(), 34), din0 = uniform(m.shape(), 35);
    Tensor din = din0.clone(), gdin = din0.to(dev());
    ops::roll_backward(c, din, dout, sh, sw);
    cuda::roll_backward(g, gdin, dout.to(dev()), sh, sw);
    CHECK(bitwise_equal(gdin, din));
  }
  Tensor padded = Tensor::empty({3, 14, 14, 5}), gpadded = poisoned({3, 14, 14, 5}, dev());
  ops::pad_hw(c, padded, m);
  cuda::pad_hw(g, gpadded, gm);
  CHECK(bitwise_equal(gpadded, padded));
  Tensor dpad = uniform({3, 14, 14, 5}, 36), din0 = uniform(m.shape(), 37);
  Tensor din = din0.clone(), gdin = din0.to(dev());
  ops::pad_hw_backward(c, din, dpad);
  cuda::pad_hw_backward(g, gdin, dpad.to(dev()));
  CHECK(bitwise_equal(gdin, din));
}

TEST_CASE("cuda window_partition and window_merge match the reference, vectorised and not") {
  Context c = reference(), g = gpu();
  struct Case {
    int64_t B, H, W, C, wh, ww, sh, sw;
  };
  // C % 4 == 0 takes the float4 kernels, odd C the scalar ones; Swin-T's first stage is 56x56x96.
  for (const Case& k : {Case{2, 56, 56, 96, 7, 7, 3, 3}, Case{1, 7, 10, 3, 4, 3, 2, 1}, Case{3, 5, 5, 8, 7, 7, 0, 0},
                        Case{2, 14, 14, 12, 7, 7, 3, 3}}) {
    CAPTURE(k.C);
    const int64_t nH = (k.H + k.wh - 1) / k.wh, nW = (k.W + k.ww - 1) / k.ww;
    const Shape ws = {k.B, nH, nW, k.wh, k.ww, k.C}, xs = {k.B, k.H, k.W, k.C};
    Tensor x = uniform(xs, 36), windows = Tensor::empty(ws), gwindows = poisoned(ws, dev());
    ops::window_partition(c, windows, x, k.sh, k.sw);
    cuda::window_partition(g, gwindows, x.to(dev()), k.sh, k.sw);
    CHECK(bitwise_equal(gwindows, windows));
    Tensor dwin = uniform(ws, 37), y0 = uniform(xs, 38);
    for (ops::DxMode mode : {ops::DxMode::add, ops::DxMode::overwrite}) {
      Tensor y = y0.clone(), gy = mode == ops::DxMode::add ? y0.to(dev()) : poisoned(xs, dev());
      ops::window_merge(c, y, dwin, k.sh, k.sw, mode);
      cuda::window_merge(g, gy, dwin.to(dev()), k.sh, k.sw, mode);
      CHECK(bitwise_equal(gy, y));
    }
  }
  // An empty map under windows that cover more than it (the op's checks allow it): zeros.
  const Shape empty_x = {1, 0, 5, 4}, cover = {1, 1, 1, 3, 5, 4};
  Tensor ex = Tensor::empty(empty_x), ew = Tensor::empty(cover), gew = poisoned(cover, dev());
  ops::window_partition(c, ew, ex, 0, 0);
  cuda::window_partition(g, gew, ex.to(dev()), 0, 0);
  CHECK(bitwise_equal(gew, ew));
}

namespace {

// Concatenates inputs of `channels` channels each (N x C_i x h x w) on the GPU and with the
// reference kernels, then adds the split of one gradient into each input's gradient; both must
// agree bit for bit (copies and one addition each).
void check_concat_and_split(const std::vector<int64_t>& channels, int64_t n, int64_t h, int64_t w, uint64_t seed) {
  Context c = reference(), g = gpu();
  std::vector<Tensor> parts, gparts, d, gd;
  int64_t total = 0;
  for (int64_t ci : channels) {
    parts.push_back(uniform({n, ci, h, w}, seed++));
    gparts.push_back(parts.back().to(dev()));
    d.push_back(uniform({n, ci, h, w}, seed++));
    gd.push_back(d.back().to(dev()));
    total += ci;
  }
  Tensor out = Tensor::empty({n, total, h, w}), gout = poisoned({n, total, h, w}, dev());
  ops::concat_channels(c, out, parts);
  cuda::concat_channels(g, gout, gparts);
  CHECK(bitwise_equal(gout, out));
  Tensor dout = uniform({n, total, h, w}, seed);
  std::vector<Tensor*> dp, gdp;
  for (size_t i = 0; i < d.size(); ++i) {
    dp.push_back(&d[i]);
    gdp.push_back(&gd[i]);
  }
  ops::split_channels_backward(c, dp, dout);
  cuda::split_channels_backward(g, gdp, dout.to(dev()));
  for (size_t i = 0; i < d.size(); ++i) CHECK(bitwise_equal(gd[i], d[i]));
}

}  // namespace

// 7x7 images: runs of 49 floats, one float at a time; the third input's run (588 floats) a block
// layer per image, four floats a thread, the last thread's short.
TEST_CASE("cuda concat_channels and split_channels_backward match the reference") {
  check_concat_and_split({5, 1, 12}, 3, 7, 7, 40);
}

// 4x4 images: every run and offset a multiple of 4 floats, so both run four floats at a time; an
// empty input among them.
TEST_CASE("cuda concat_channels and split_channels_backward in 16-byte accesses match the reference") {
  check_concat_and_split({5, 1, 0, 12, 3}, 3, 4, 4, 300);
}

// One launch takes at most 64 inputs: 70 of 1 to 3 channels (one of them empty) take two.
TEST_CASE("cuda concat_channels and split_channels_backward over more inputs than one launch takes") {
  std::vector<int64_t> channels;
  for (int i = 0; i < 70; ++i) channels.push_back(i == 33 ? 0 : 1 + i % 3);
  check_concat_and_split(channels, 2, 5, 3, 60);
}

TEST_CASE("cuda index_select and its backward (repeated rows) match the reference bit for bit") {
  Context c = reference(), g = gpu();
  const int64_t R = 169, D = 6, n = 2401;  // Swin's relative position table for 7x7 windows
  Tensor table = uniform({R, D}, 50), index = random_labels(n, R, 51);
  Tensor gtable = table.to(dev()), gindex = index.to(dev());
  Tensor out = Tensor::empty({n, D}), gout = poisoned({n, D}, dev());
  ops::index_select(c, out, table, index);
  cuda::index_select(g, gout, gtable, gindex);
  CHECK(bitwise_equal(gout, out));
  Tensor dout = uniform({n, D}, 52), dt0 = uniform({R, D}, 53);
  Tensor dt = dt0.clone(), gdt = dt0.to(dev());
  ops::index_select_backward(c, dt, dout, index);
  cuda::index_select_backward(g, gdt, dout.to(dev()), gindex);
  CHECK(bitwise_equal(gdt, dt));  // the same additions in the same (index) order
}
