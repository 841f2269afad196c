// The op profiler (kernels/op_profile.hpp): counts every op the dispatcher runs while enabled and
// counting, with the exact FLOPs of convolutions, linear layers and matrix products, merged over
// threads; nothing when off, or on a thread that is not counting.
#include <doctest/doctest.h>

#include <thread>

#include "core/clock.hpp"
#include "kernels/op_profile.hpp"
#include "kernels/ops.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
namespace profile = dpx::ops::profile;

namespace {

// The profiler on, counting on this thread, from a clean slate; off and clean again afterwards.
struct Profiling {
  profile::Counting counting{true};
  Profiling() {
    profile::reset();
    profile::set_enabled(true);
  }
  ~Profiling() {
    profile::set_enabled(false);
    profile::reset();
  }
};

const profile::OpStats* find(const std::vector<profile::OpStats>& stats, const std::string& name) {
  for (const auto& s : stats)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace

TEST_CASE("the op profiler counts calls and exact FLOPs of conv2d, linear and matmul") {
  Profiling on;
  Context ctx = Context::cpu(2);
  // x (2, 4, 9, 9), w (6, 2, 3, 3): groups 2, stride 2, padding 1 -> y (2, 6, 5, 5).
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 1;
  p.groups = 2;
  Tensor x = dpx::testing::randn({2, 4, 9, 9}, 1), w = dpx::testing::randn({6, 2, 3, 3}, 2);
  Tensor b = dpx::testing::randn({6}, 3), y = Tensor::empty({2, 6, 5, 5});
  ops::conv2d_forward(ctx, y, x, w, &b, p);
  ops::conv2d_forward(ctx, y, x, w, nullptr, p);
  const double conv = 2.0 * 2 * 6 * 5 * 5 * 2 * 3 * 3;  // 2 N K OH OW (C/groups) kh kw = 10800
  Tensor dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape()), db = Tensor::zeros({6});
  ops::conv2d_backward(ctx, &dx, &dw, &db, y, x, w, p, ops::DxMode::add);       // dx and dW: twice the products
  ops::conv2d_backward(ctx, nullptr, &dw, nullptr, y, x, w, p, ops::DxMode::add);  // dW only

  // linear: x (3, 5), w (4, 5) -> y (3, 4): 2 * 3 * 4 * 5 = 120 per product.
  Tensor lx = dpx::testing::randn({3, 5}, 4), lw = dpx::testing::randn({4, 5}, 5), ly = Tensor::empty({3, 4});
  ops::linear_forward(ctx, ly, lx, lw, nullptr);
  Tensor ldx = Tensor::zeros(lx.shape()), ldw = Tensor::zeros(lw.shape());
  ops::linear_backward(ctx, &ldx, &ldw, nullptr, ly, lx, lw, ops::DxMode::add);
  // matmul: a (2, 5, 3) transposed, b (2, 5, 4) -> c (2, 3, 4): 2 * 2 * 3 * 4 * 5 = 240.
  Tensor a = dpx::testing::randn({2, 5, 3}, 6), mb = dpx::testing::randn({2, 5, 4}, 7), c = Tensor::empty({2, 3, 4});
  ops::matmul(ctx, c, a, mb, /*trans_a=*/true, /*trans_b=*/false);
  ops::relu_forward(ctx, ly, ly);

  const std::vector<profile::OpStats> stats = profile::snapshot();
  const profile::OpStats* fwd = find(stats, "conv2d_forward");
  REQUIRE(fwd);
  CHECK(fwd->calls == 2);
  CHECK(fwd->has_flops);
  CHECK(fwd->flops == 2 * conv);
  CHECK(fwd->total_s > 0);
  const profile::OpStats* bwd = find(stats, "conv2d_backward");
  REQUIRE(bwd);
  CHECK(bwd->calls == 2);
  CHECK(bwd->flops == 3 * conv);
  const profile::OpStats* lin = find(stats, "linear_forward");
  REQUIRE(lin);
  CHECK(lin->flops == 120);
  const profile::OpStats* lin_bwd = find(stats, "linear_backward");
  REQUIRE(lin_bwd);
  CHECK(lin_bwd->flops == 240);
  const profile::OpStats* mm = find(stats, "matmul");
  REQUIRE(mm);
  CHECK(mm->flops == 240);
  const profile::OpStats* relu = find(stats, "relu_forward");
  REQUIRE(relu);
  CHECK(relu->calls == 1);
  CHECK(!relu->has_flops);
  for (size_t i = 1; i < stats.size(); ++i) CHECK(stats[i - 1].total_s >= stats[i].total_s);  // by time

  profile::reset();
  CHECK(profile::snapshot().empty());
}

TEST_CASE("by shape, the op profiler counts an op's calls apart per shape and parameters") {
  Profiling on;
  profile::set_by_shape(true);
  struct Off {
    ~Off() { profile::set_by_shape(false); }
  } off;
  Context ctx = Context::cpu(1);
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  Tensor x = dpx::testing::randn({2, 4, 9, 9}, 1), w = dpx::testing::randn({6, 4, 3, 3}, 2);
  Tensor y = Tensor::empty({2, 6, 9, 9});
  ops::conv2d_forward(ctx, y, x, w, nullptr, p);
  ops::conv2d_forward(ctx, y, x, w, nullptr, p);
  // The same tensors at stride 2: another row.
  ops::Conv2dParams s2 = p;
  s2.stride_h = s2.stride_w = 2;
  Tensor y2 = Tensor::empty({2, 6, 5, 5});
  ops::conv2d_forward(ctx, y2, x, w, nullptr, s2);
  // A depthwise convolution with a bias: groups in the parameters, the bias's shape.
  ops::Conv2dParams dw = p;
  dw.groups = 4;
  Tensor wd = dpx::testing::randn({4, 1, 3, 3}, 3), bd = dpx::testing::randn({4}, 4), yd = Tensor::empty({2, 4, 9, 9});
  ops::conv2d_forward(ctx, yd, x, wd, &bd, dw);
  Tensor dx = Tensor::zeros(x.shape());
  ops::conv2d_backward(ctx, &dx, nullptr, nullptr, y, x, w, p, ops::DxMode::overwrite);
  ops::relu_forward(ctx, y2, y2);
  ops::concat_channels(ctx, y, {x, Tensor::empty({2, 2, 9, 9})});

  const std::vector<profile::OpStats> stats = profile::snapshot();
  auto row = [&](const std::string& name, const std::string& shape) -> const profile::OpStats* {
    for (const auto& s : stats)
      if (s.name == name && s.shape == shape) return &s;
    return nullptr;
  };
  const profile::OpStats* same = row("conv2d_forward", "2x6x9x9 2x4x9x9 6x4x3x3 - s1x1 p1x1 d1x1 g1");
  REQUIRE(same);
  CHECK(same->calls == 2);
  CHECK(same->flops == 2 * (2.0 * 2 * 6 * 9 * 9 * 4 * 3 * 3));
  const profile::OpStats* strided = row("conv2d_forward", "2x6x5x5 2x4x9x9 6x4x3x3 - s2x2 p1x1 d1x1 g1");
  REQUIRE(strided);
  CHECK(strided->calls == 1);
  CHECK(row("conv2d_forward", "2x4x9x9 2x4x9x9 4x1x3x3 4 s1x1 p1x1 d1x1 g4"));
  // conv2d_backward(dx, dw, db, dy, x, w): the gradients not asked for are "-".
  CHECK(row("conv2d_backward", "2x4x9x9 - - 2x6x9x9 2x4x9x9 6x4x3x3 s1x1 p1x1 d1x1 g1"));
  CHECK(row("relu_forward", "2x6x5x5 2x6x5x5"));
  CHECK(row("concat_channels", "2x6x9x9 {2 tensors}"));
  int conv_rows = 0;
  for (const auto& s : stats) conv_rows += s.name == "conv2d_forward";
  CHECK(conv_rows == 3);
}

TEST_CASE("by op (the default), every call of an op is one row with no shape") {
  Profiling on;
  Context ctx = Context::cpu(1);
  Tensor a = dpx::testing::randn({3, 4}, 1), b = dpx::testing::randn({5, 6}, 2);
  ops::relu_forward(ctx, a, a);
  ops::relu_forward(ctx, b, b);
  const std::vector<profile::OpStats> stats = profile::snapshot();
  const profile::OpStats* relu = find(stats, "relu_forward");
  REQUIRE(relu);
  CHECK(relu->calls == 2);
  CHECK(relu->shape.empty());
}

TEST_CASE("the op profiler counts only when enabled, on counting threads, and merges the threads") {
  Profiling on;
  Context ctx = Context::cpu(1);
  Tensor t = Tensor::zeros({16});
  {
    profile::Counting off(false);
    ops::fill(ctx, t, 1.f);
  }
  CHECK(profile::snapshot().empty());
  profile::set_enabled(false);
  ops::fill(ctx, t, 1.f);
  CHECK(profile::snapshot().empty());
  profile::set_enabled(true);

  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i)
    threads.emplace_back([&] {
      Tensor mine = Tensor::zeros({16});
      ops::fill(ctx, mine, 2.f);  // a new thread does not count ...
      profile::Counting counting(true);
      for (int k = 0; k < 5; ++k) ops::fill(ctx, mine, 2.f);  // ... until it says so
    });
  for (auto& th : threads) th.join();
  ops::fill(ctx, t, 3.f);
  const std::vector<profile::OpStats> stats = profile::snapshot();
  REQUIRE(stats.size() == 1);
  CHECK(stats[0].name == "fill");
  CHECK(stats[0].calls == 16);
}

// dpx train --trace with --profile-ops: a traced step's ops as spans, by their row of ops.def.
TEST_CASE("a Tracing scope leaves a span per op, counted or not, only while enabled") {
  Profiling on;
  Context ctx = Context::cpu(1);
  Tensor t = Tensor::zeros({16}), u = Tensor::zeros({16});
  ops::fill(ctx, t, 1.f);
  CHECK(profile::take_spans().empty());  // counted, not traced
  const double before = now_s();
  {
    profile::Counting off(false);
    profile::Tracing tracing(true);
    ops::fill(ctx, t, 2.f);
    ops::copy(ctx, u, t);
  }
  std::vector<profile::OpSpan> spans = profile::take_spans();
  REQUIRE(spans.size() == 2);
  CHECK(std::string(profile::op_name(spans[0].op)) == "fill");
  CHECK(std::string(profile::op_name(spans[1].op)) == "copy");
  CHECK(spans[0].start_s >= before);
  CHECK(spans[0].start_s + spans[0].seconds <= spans[1].start_s + 1e-9);
  CHECK(spans[1].start_s + spans[1].seconds <= now_s());
  CHECK(profile::take_spans().empty());  // taken
  const auto stats = profile::snapshot();
  REQUIRE(stats.size() == 1);  // the traced calls were not counted: Counting was off
  CHECK(stats[0].calls == 1);
  profile::set_enabled(false);
  {
    profile::Tracing tracing(true);
    ops::fill(ctx, t, 3.f);
  }
  CHECK(profile::take_spans().empty());  // off: nothing, as --trace without --profile-ops
  CHECK(profile::op_index("conv2d_forward") >= 0);
  CHECK(std::string(profile::op_name(profile::op_index("conv2d_forward"))) == "conv2d_forward");
  CHECK(profile::op_index("no_such_op") == -1);
  CHECK(std::string(profile::op_name(-1)) == "?");
}
