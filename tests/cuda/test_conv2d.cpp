// GPU tests of the cuDNN convolution against the CPU op and a float64 loop: odd sizes, strides,
// padding, dilation, groups (depthwise too), with and without bias, with and without the ReLU
// epilogue; backward accumulating into dx, dw and db. Norm-wise errors, as for every reduction (gpu_test_util.hpp).
#include <doctest/doctest.h>

#include <vector>

#include "kernels/conv_paths.hpp"
#include "kernels/cuda/conv_plan.hpp"
#include "kernels/ref/ref_ops.hpp"
#include "tests/cuda/gpu_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

struct ConvCase {
  int64_t n, c, h, w, k, kh, kw;
  ops::Conv2dParams p;
};

ops::Conv2dParams params(int stride_h, int stride_w, int pad_h, int pad_w, int dil, int groups) {
  ops::Conv2dParams p;
  p.stride_h = stride_h;
  p.stride_w = stride_w;
  p.pad_h = pad_h;
  p.pad_w = pad_w;
  p.dilation_h = p.dilation_w = dil;
  p.groups = groups;
  return p;
}

std::vector<ConvCase> cases() {
  return {
      {3, 5, 13, 13, 7, 3, 3, params(1, 1, 1, 1, 1, 1)},   // the common 3x3 "same"
      {3, 5, 13, 11, 6, 5, 3, params(2, 1, 0, 1, 1, 1)},   // odd strides, uneven kernel
      {2, 6, 13, 13, 9, 3, 3, params(2, 2, 1, 1, 1, 3)},   // groups
      {3, 5, 13, 13, 10, 3, 3, params(2, 2, 1, 1, 1, 5)},  // depthwise with multiplier 2
      {2, 4, 15, 13, 3, 3, 3, params(1, 1, 2, 2, 2, 1)},   // dilation
      {3, 8, 13, 13, 5, 1, 1, params(2, 2, 0, 0, 1, 1)},   // 1x1 projection, stride 2
      {1, 3, 29, 27, 16, 7, 7, params(2, 2, 3, 3, 1, 1)},  // a ResNet stem, shrunk
      // Squeeze-excitation's 1x1 maps: the bias a thread a value, db summed as rows (the other
      // cases' planes under 256 values take the same flat bias kernel).
      {70, 6, 1, 1, 9, 1, 1, params(1, 1, 0, 0, 1, 1)},
      // Planes of whole float4s (the bias kernel's float4 path), 1,296 of them: a block's 1,024
      // and a ragged second block (the other cases' odd planes take its float path).
      {2, 3, 72, 72, 4, 3, 3, params(1, 1, 1, 1, 1, 1)},
      // Depthwise ones run dpx's kernels (kernels/conv_paths.hpp): EfficientNet's 5x5 stride 2,
      // dilation with a multiplier of 2, and enough positions for several of the weight gradient's
      // chunks (3x3 and 5x5: every tap of a channel a block, loops unrolled); a 7x7 and a 3x5 take
      // the kernels for any size (a tap a block).
      {3, 6, 17, 19, 6, 5, 5, params(2, 2, 2, 2, 1, 6)},
      {2, 4, 15, 13, 8, 3, 3, params(1, 1, 2, 2, 2, 4)},
      {8, 8, 64, 64, 8, 3, 3, params(1, 1, 1, 1, 1, 8)},
      {2, 4, 12, 10, 4, 7, 7, params(1, 1, 3, 3, 1, 4)},
      {3, 5, 11, 13, 10, 3, 5, params(2, 1, 1, 2, 1, 5)},
  };
}

// The cases cuDNN runs, so that choose an algorithm: depthwise ones in fp32 run dpx's kernels.
size_t cudnn_cases() {
  size_t n = 0;
  for (const ConvCase& k : cases()) n += !kernels::depthwise_by_dpx(k.c, k.k, k.p.groups, false);
  return n;
}

// The reference kernel (kernels/ref/conv2d.cpp: the direct loops, summed in double).
Tensor conv_reference(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p,
                      int64_t oh, int64_t ow) {
  Context ctx = Context::cpu();
  Tensor y = Tensor::empty({x.size(0), w.size(0), oh, ow});
  ref::conv2d_forward(ctx, y, x, w, &b, p);
  return y;
}

// Every case's forward and backward on `g` against the reference kernels.
void check_cases(Context g) {
  Context c = reference();
  uint64_t seed = 100;
  for (const ConvCase& k : cases()) {
    CAPTURE(k.c);
    CAPTURE(k.k);
    CAPTURE(k.p.groups);
    CAPTURE(k.p.stride_h);
    const auto& p = k.p;
    int64_t oh = ops::conv_out_size(k.h, int(k.kh), p.stride_h, p.pad_h, p.dilation_h);
    int64_t ow = ops::conv_out_size(k.w, int(k.kw), p.stride_w, p.pad_w, p.dilation_w);
    Tensor x = uniform({k.n, k.c, k.h, k.w}, ++seed), w = uniform({k.k, k.c / p.groups, k.kh, k.kw}, ++seed);
    Tensor b = uniform({k.k}, ++seed), dy = uniform({k.n, k.k, oh, ow}, ++seed);
    Tensor gx = x.to(dev()), gw = w.to(dev()), gb = b.to(dev()), gdy = dy.to(dev());

    Tensor y = Tensor::empty({k.n, k.k, oh, ow}), gy = poisoned({k.n, k.k, oh, ow}, dev());
    ops::conv2d_forward(c, y, x, w, &b, p);
    ops::conv2d_forward(g, gy, gx, gw, &gb, p);
    CHECK(norm_rel_diff(gy, conv_reference(x, w, b, p, oh, ow)) <= 1e-5);
    CHECK(norm_rel_diff(gy, y) <= 1e-5);
    ops::conv2d_forward(c, y, x, w, nullptr, p);
    ops::conv2d_forward(g, gy, gx, gw, nullptr, p);
    CHECK(norm_rel_diff(gy, y) <= 1e-5);
    // Epilogue::relu (folded into the bias pass, else a pass in place): relu_forward of the plain
    // output, bit for bit, with the bias and without.
    for (const Tensor* bias : {static_cast<const Tensor*>(&gb), static_cast<const Tensor*>(nullptr)}) {
      CAPTURE(bias != nullptr);
      ops::Conv2dParams relu = p;
      relu.epilogue = ops::Epilogue::relu;
      Tensor plain = poisoned(gy.shape(), dev()), fused = poisoned(gy.shape(), dev()), want = poisoned(gy.shape(), dev());
      ops::conv2d_forward(g, plain, gx, gw, bias, p);
      ops::conv2d_forward(g, fused, gx, gw, bias, relu);
      ops::relu_forward(g, want, plain);
      CHECK(bitwise_equal(fused, want));
    }

    Tensor dx0 = uniform(x.shape(), ++seed), dw0 = uniform(w.shape(), ++seed), db0 = uniform({k.k}, ++seed);
    Tensor dx = dx0.clone(), dw = dw0.clone(), db = db0.clone();
    Tensor gdx = dx0.to(dev()), gdw = dw0.to(dev()), gdb = db0.to(dev());
    ops::conv2d_backward(c, &dx, &dw, &db, dy, x, w, p, ops::DxMode::add);
    ops::conv2d_backward(g, &gdx, &gdw, &gdb, gdy, gx, gw, p, ops::DxMode::add);
    CHECK(norm_rel_diff(gdx, dx) <= 1e-5);
    CHECK(norm_rel_diff(gdw, dw) <= 1e-5);
    CHECK(norm_rel_diff(gdb, db) <= 1e-5);
    ops::conv2d_backward(c, nullptr, &dw, nullptr, dy, x, w, p, ops::DxMode::add);
    ops::conv2d_backward(g, nullptr, &gdw, nullptr, gdy, gx, gw, p, ops::DxMode::add);
    CHECK(norm_rel_diff(gdw, dw) <= 1e-5);
    // DxMode::overwrite (cuDNN's beta 0): what dx held (NaN) is written over.
    Tensor over = Tensor::zeros(x.shape()), gover = poisoned(x.shape(), dev());
    ops::conv2d_backward(c, &over, nullptr, nullptr, dy, x, w, p, ops::DxMode::overwrite);
    ops::conv2d_backward(g, &gover, nullptr, nullptr, gdy, gx, gw, p, ops::DxMode::overwrite);
    CHECK(norm_rel_diff(gover, over) <= 1e-5);
  }
}

// The convolutions cached so far: the legacy calls' algorithm choices and the graph API's plans
// (a shape the graph API declined has a null plan and a legacy choice).
size_t plans() {
  size_t n = 0;
  for (const auto& [key, plan] : state().conv_plans) n += plan != nullptr;
  return n;
}
size_t cached() { return state().conv_algos.size() + plans(); }

// Unless DPX_CUDNN_API=legacy (ctest's cuda/test_conv2d_legacy), the graph API ran cases: a
// fallback to the legacy calls for every shape would pass the comparisons and hide that the
// graph path never ran. How many passes it took is said (a declined shape falls back, by design;
// DPX_CUDNN_LOG=1 says why).
void check_graph_api_ran(size_t plans_before, size_t passes) {
  if (cuda::conv_graph_api_enabled()) {
    MESSAGE("graph-API plans built: ", plans() - plans_before, " (", passes * cudnn_cases(),
            " shape-passes, dx written and added to counting apart)");
    CHECK(plans() > plans_before);
  } else {
    CHECK(plans() == plans_before);
  }
}

}  // namespace

TEST_CASE("cuda conv2d forward and backward match the reference and float64, no TF32") {
  const size_t before = cached(), plans_before = plans();
  check_cases(gpu());
  // The choices (or plans) were cached per shape and pass.
  CHECK(cached() >= before + cudnn_cases());
  check_graph_api_ran(plans_before, 3);  // forward, data, filter per shape
}

// --cudnn-algo search: cudnnFind*AlgorithmEx (legacy) or dpx (graph API) times the candidates on
// scratch outputs, so the gradients accumulated into dx and dw (beta 1) are not disturbed by the
// search; the choices are cached under keys of their own, apart from the heuristic's.
TEST_CASE("cuda conv2d with the algorithms found by timing (--cudnn-algo search) matches the reference") {
  Context g = gpu();
  g.conv_search = true;
  const size_t before = cached(), plans_before = plans();
  check_cases(g);
  CHECK(cached() >= before + 3 * cudnn_cases());  // forward, data, filter per shape
  check_graph_api_ran(plans_before, 3);
}

TEST_CASE("cuda conv2d: shape errors are clear") {
  Context g = gpu();
  Tensor x = Tensor::empty({2, 4, 9, 9}, DType::f32, dev()), w = Tensor::empty({6, 3, 3, 3}, DType::f32, dev());
  Tensor y = Tensor::empty({2, 6, 7, 7}, DType::f32, dev());
  CHECK_THROWS_AS(ops::conv2d_forward(g, y, x, w, nullptr, ops::Conv2dParams{}), Error);  // 4 vs 3 channels
}
