// --precision bf16 and fp16 on the GPU (Context::compute): the cast op narrows and widens exactly
// as the CPU does; cuBLAS products and cuDNN convolutions round their operands to the compute
// dtype and accumulate in fp32. Each product is compared with the reference kernels run on the
// rounded operands (what the GPU should compute, up to summation order) and must be closer to it
// than the fp32 result on the unrounded operands is: so a path that forgot to round, or rounded
// something else, fails. A resnet18 step in bf16 and fp16 stays near its fp32 step (its loss in
// training mode, its gradients in eval mode). A convolution's half-precision output handed to a
// batch norm, and its gradient handed back, give the fp32 maps' bits (the last test).
// Written without a GPU at hand: run by scripts/gpu.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/ref/ref_ops.hpp"
#include "layers/loss.hpp"
#include "layers/model.hpp"
#include "tests/cuda/gpu_test_util.hpp"
#include "zoo/registry.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

const DType kHalves[] = {DType::bf16, DType::f16};

Context gpu_in(DType compute) {
  Context g = gpu();
  g.compute = compute;
  return g;
}

// x rounded to `half` and widened back, on the host (the CPU cast op).
Tensor rounded(const Tensor& x, DType half) {
  Context c = Context::cpu(1);
  Tensor h = Tensor::empty(x.shape(), half), back = Tensor::empty(x.shape());
  ops::cast(c, h, x, 1.f);
  ops::cast(c, back, h, 1.f);
  return back;
}

// The GPU's result must be within `tol` of the reference on rounded operands, and nearer to it
// than the unrounded reference is (by a factor 4).
void check_rounded(const Tensor& gpu_result, const Tensor& want_rounded, const Tensor& want_fp32, double tol) {
  const Tensor got = gpu_result.to(Device::cpu());
  const double to_rounded = norm_rel_diff(got, want_rounded);
  const double rounding = norm_rel_diff(want_rounded, want_fp32);
  CAPTURE(to_rounded);
  CAPTURE(rounding);
  CHECK(rounding > 0);  // the operands did change when rounded
  CHECK(to_rounded <= std::min(tol, rounding / 4));
}

}  // namespace

TEST_CASE("cuda cast narrows and widens bit for bit as the CPU, -0, inf and the scale included") {
  Context g = gpu(), c = Context::cpu(1);
  Tensor x = uniform({100003}, 1, -70000.f, 70000.f);  // past fp16's range at both ends
  x.data<float>()[5] = -0.f;
  x.data<float>()[6] = std::numeric_limits<float>::infinity();
  for (DType half : kHalves) {
    CAPTURE(dtype_name(half));
    for (float alpha : {1.f, 0.25f}) {
      Tensor h = Tensor::empty({100003}, half), back = Tensor::empty({100003});
      ops::cast(c, h, x, alpha);
      ops::cast(c, back, h, 3.f);
      Tensor gh = Tensor::empty({100003}, half, dev()), gback = poisoned({100003}, dev());
      ops::cast(g, gh, x.to(dev()), alpha);
      ops::cast(g, gback, gh, 3.f);
      CHECK(bitwise_equal(gh.to(Device::cpu()), h));
      CHECK(bitwise_equal(gback.to(Device::cpu()), back));
    }
  }
}

TEST_CASE("cuda linear and matmul in bf16/fp16 equal fp32 products of the rounded operands") {
  Context ref = reference();
  const int64_t n = 7, in = 1031, out = 33;
  Tensor x = uniform({n, in}, 1), w = uniform({out, in}, 2), b = uniform({out}, 3), dy = uniform({n, out}, 4);
  for (DType half : kHalves) {
    CAPTURE(dtype_name(half));
    Context g = gpu_in(half);
    const Tensor rx = rounded(x, half), rw = rounded(w, half), rdy = rounded(dy, half);
    // Forward, with the bias (added in fp32).
    Tensor want = Tensor::empty({n, out}), want32 = Tensor::empty({n, out});
    ref::linear_forward(ref, want, rx, rw, &b);
    ref::linear_forward(ref, want32, x, w, &b);
    Tensor gy = poisoned({n, out}, dev()), gb = b.to(dev());
    ops::linear_forward(g, gy, x.to(dev()), w.to(dev()), &gb);
    check_rounded(gy, want, want32, 1e-5);
    // Backward: dx and dw accumulate into what was there, db is fp32 sums of dy.
    Tensor dx0 = uniform({n, in}, 5), dw0 = uniform({out, in}, 6);
    Tensor dx = dx0.clone(), dw = dw0.clone(), dx32 = dx0.clone(), dw32 = dw0.clone();
    ref::linear_backward(ref, &dx, &dw, nullptr, rdy, rx, rw, ops::DxMode::add);
    ref::linear_backward(ref, &dx32, &dw32, nullptr, dy, x, w, ops::DxMode::add);
    Tensor gdx = dx0.to(dev()), gdw = dw0.to(dev());
    ops::linear_backward(g, &gdx, &gdw, nullptr, dy.to(dev()), x.to(dev()), w.to(dev()), ops::DxMode::add);
    // dx0 and dw0 dominate the sums: compare the increments, where the rounding shows.
    auto increment = [](const Tensor& t, const Tensor& t0) {
      Tensor d = t.to(Device::cpu()).clone();
      Context c = Context::cpu(1);
      ops::axpy(c, d, -1.f, t0);
      return d;
    };
    check_rounded(increment(gdx, dx0), increment(dx, dx0), increment(dx32, dx0), 1e-5);
    check_rounded(increment(gdw, dw0), increment(dw, dw0), increment(dw32, dw0), 1e-5);
    // Batched matmul with both transposes (Swin's attention).
    Tensor a = uniform({3, 40, 24}, 7), bm = uniform({3, 56, 40}, 8);
    Tensor m = Tensor::empty({3, 24, 56}), m32 = Tensor::empty({3, 24, 56});
    ref::matmul(ref, m, rounded(a, half), rounded(bm, half), true, true, 0.5f, 0.f);
    ref::matmul(ref, m32, a, bm, true, true, 0.5f, 0.f);
    Tensor gm = poisoned({3, 24, 56}, dev());
    ops::matmul(g, gm, a.to(dev()), bm.to(dev()), true, true, 0.5f, 0.f);
    check_rounded(gm, m, m32, 1e-5);
  }
}

TEST_CASE("cuda conv2d in bf16/fp16: cuDNN on rounded operands, the result rounded once, added in fp32") {
  Context ref = reference();
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  // Stride 2 gives 8 x 7 output planes (whole float4s: the bias pass that widens the result moves
  // 4 values a thread), stride 1 gives 15 x 13 (one a thread).
  for (auto [groups, stride] : {std::pair{1, 2}, std::pair{4, 2}, std::pair{1, 1}}) {
    p.groups = groups;
    p.stride_h = p.stride_w = stride;
    CAPTURE(groups);
    CAPTURE(stride);
    const int64_t n = 3, c = 8, h = 15, w = 13, k = 12, kh = 3, kw = 3;
    const int64_t oh = ops::conv_out_size(h, kh, p.stride_h, p.pad_h, p.dilation_h);
    const int64_t ow = ops::conv_out_size(w, kw, p.stride_w, p.pad_w, p.dilation_w);
    Tensor x = uniform({n, c, h, w}, 11), wt = uniform({k, c / groups, kh, kw}, 12), b = uniform({k}, 13);
    Tensor dy = uniform({n, k, oh, ow}, 14);
    for (DType half : kHalves) {
      CAPTURE(dtype_name(half));
      Context g = gpu_in(half);
      // The result of cuDNN is rounded to the half type once: within half a unit of it of the
      // reference (u = 2^-8 bf16, 2^-11 fp16, relative), norm-wise. bf16 convolves with cuDNN's
      // bf16 compute type (as PyTorch): tensor cores accumulate in fp32, but an algorithm without
      // them may round partial sums, hence 4 u there.
      const double unit = half == DType::bf16 ? 4 * std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      const Tensor rx = rounded(x, half), rw = rounded(wt, half), rdy = rounded(dy, half);
      Tensor want = Tensor::empty({n, k, oh, ow}), want32 = Tensor::empty({n, k, oh, ow});
      ref::conv2d_forward(ref, want, rx, rw, &b, p);
      ref::conv2d_forward(ref, want32, x, wt, &b, p);
      Tensor gy = poisoned({n, k, oh, ow}, dev()), gb = b.to(dev());
      ops::conv2d_forward(g, gy, x.to(dev()), wt.to(dev()), &gb, p);
      CHECK(norm_rel_diff(gy.to(Device::cpu()), want) <= unit);
      // The ReLU epilogue: folded into the pass that widens the result and adds the bias; without
      // a bias, a pass in place after the widening.
      ops::Conv2dParams relu = p;
      relu.epilogue = ops::Epilogue::relu;
      for (const Tensor* bias : {static_cast<const Tensor*>(&gb), static_cast<const Tensor*>(nullptr)}) {
        CAPTURE(bias != nullptr);
        Tensor plain = poisoned(gy.shape(), dev()), fused = poisoned(gy.shape(), dev());
        Tensor clamped = poisoned(gy.shape(), dev());
        ops::conv2d_forward(g, plain, x.to(dev()), wt.to(dev()), bias, p);
        ops::conv2d_forward(g, fused, x.to(dev()), wt.to(dev()), bias, relu);
        ops::relu_forward(g, clamped, plain);
        CHECK(bitwise_equal(fused, clamped));
      }
      // Backward: dx overwritten, dw and db accumulated.
      Tensor dx = Tensor::zeros({n, c, h, w}), dw = uniform(wt.shape(), 15), db = uniform({k}, 16);
      Tensor gdx = poisoned({n, c, h, w}, dev()), gdw = dw.to(dev()), gdb = db.to(dev());
      ref::conv2d_backward(ref, &dx, &dw, nullptr, rdy, rx, rw, p, ops::DxMode::add);
      ops::conv2d_backward(g, &gdx, &gdw, &gdb, dy.to(dev()), x.to(dev()), wt.to(dev()), p, ops::DxMode::overwrite);
      CHECK(norm_rel_diff(gdx.to(Device::cpu()), dx) <= unit);
      CHECK(norm_rel_diff(gdw.to(Device::cpu()), dw) <= unit);
      // The bias gradient sums the fp32 dy, not the rounded one.
      ref::conv2d_backward(ref, nullptr, nullptr, &db, dy, x, wt, p, ops::DxMode::add);
      CHECK(norm_rel_diff(gdb.to(Device::cpu()), db) <= 1e-5);
    }
  }
}

// A half-precision result added into fp32 gradients whose sizes are not whole quads: the widening
// with beta 1 moves four values a thread and its tail (3 here) one at a time. 7 x 5 x 3 x 3 = 315
// filter values, 2 x 5 x 9 x 7 = 630 input values.
TEST_CASE("cuda conv2d in bf16/fp16: gradients of sizes past the last quad accumulate") {
  Context ref = reference();
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  Tensor x = uniform({2, 5, 9, 7}, 31), wt = uniform({7, 5, 3, 3}, 32), dy = uniform({2, 7, 9, 7}, 33);
  for (DType half : kHalves) {
    CAPTURE(dtype_name(half));
    Context g = gpu_in(half);
    const double unit = half == DType::bf16 ? 4 * std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    Tensor dx0 = uniform(x.shape(), 34), dw0 = uniform(wt.shape(), 35);
    Tensor dx = dx0.clone(), dw = dw0.clone(), gdx = dx0.to(dev()), gdw = dw0.to(dev());
    ref::conv2d_backward(ref, &dx, &dw, nullptr, rounded(dy, half), rounded(x, half), rounded(wt, half), p,
                         ops::DxMode::add);
    ops::conv2d_backward(g, &gdx, &gdw, nullptr, dy.to(dev()), x.to(dev()), wt.to(dev()), p, ops::DxMode::add);
    // dx0 and dw0 dominate the sums: compare the increments, where the rounding shows.
    auto increment = [](const Tensor& t, const Tensor& t0) {
      Tensor d = t.to(Device::cpu()).clone();
      Context c = Context::cpu(1);
      ops::axpy(c, d, -1.f, t0);
      return d;
    };
    CHECK(norm_rel_diff(increment(gdx, dx0), increment(dx, dx0)) <= unit);
    CHECK(norm_rel_diff(increment(gdw, dw0), increment(dw, dw0)) <= unit);
  }
}

// The gradients are compared in eval mode, the loss in training mode. A training step of resnet18
// at batch 8, 64x64 normalises its last stage over 32 values per channel, and there the gradients
// are chaotic: on the CPU alone, an input moved by 2^-9 relative (bf16's rounding) moved them by
// 15 %, by 2^-12 (fp16's) 4-6 %, and a change of the convolution algorithm alone by 0.5 % (AMD
// EPYC, 2026-11-27); the GPU's bf16 and fp16 steps were 36 % and 13 % from fp32 in three H100 runs,
// the same numbers each time. With running statistics batch norm is a fixed affine map and the same
// input moves moved the gradients by 2.4 % and 0.5-0.9 %. So the gradient bound is 10 times what
// the fp32 step's own gradients do when its input moves by the half type's rounding (or the fixed
// tolerance if larger): a kernel that computes the wrong thing is off by O(1).
TEST_CASE("a resnet18 step in bf16 and fp16 stays near the fp32 step on the GPU") {
  zoo::ModelOptions o;
  o.num_classes = 10;
  o.in_channels = 3;
  o.image_size = 64;
  o.seed = 3;
  nn::Model host(zoo::build_model("resnet18", o));
  const Tensor x = uniform({8, 3, 64, 64}, 21), y = random_labels(8, 10, 22).to(dev());
  auto train_loss = [&](DType compute) {  // a training-mode forward's loss
    Context g = gpu_in(compute);
    nn::CrossEntropyLoss loss;
    nn::Model m = host.clone(dev());
    m.train();
    return loss.forward(g, m.forward(g, x.to(dev())), y);
  };
  auto eval_grads = [&](DType compute, const Tensor& input) {  // an eval-mode step's gradients
    Context g = gpu_in(compute);
    nn::CrossEntropyLoss loss;
    nn::Model m = host.clone(dev());
    m.eval();
    m.zero_grad(g);
    (void)loss.forward(g, m.forward(g, input.to(dev())), y);
    m.backward(g, loss.backward(g));
    return m.flat_grads().to(Device::cpu());
  };
  const float loss32 = train_loss(DType::f32);
  const Tensor grads32 = eval_grads(DType::f32, x);
  for (DType half : kHalves) {
    CAPTURE(dtype_name(half));
    const double rounding = half == DType::bf16 ? 0x1p-9 : 0x1p-12;  // half a unit in the last place
    double sensitivity = 0;
    for (uint64_t seed : {31, 32})
      sensitivity = std::max(sensitivity, norm_rel_diff(eval_grads(DType::f32, moved_by(x, rounding, seed)), grads32));
    const float half_loss = train_loss(half);
    const Tensor grads = eval_grads(half, x);
    const double tol = half == DType::bf16 ? 5e-2 : 1e-2, diff = norm_rel_diff(grads, grads32);
    MESSAGE(dtype_name(half) << ": training loss " << half_loss << " against " << loss32 << "; eval gradients " << diff
                             << " from fp32's, whose own move under an input moved by " << rounding << " is "
                             << sensitivity);
    CHECK(std::abs(half_loss - loss32) <= tol * std::abs(loss32));
    CHECK(diff <= std::max(4 * tol, 10 * sensitivity));
    CHECK(diff > 0);
    CHECK(sensitivity < 0.1);  // eval mode is well conditioned: the bound stays meaningful
  }
}

// What a convolution and the batch norms around it hand each other under --precision (ops.def,
// "half-precision maps"): cuDNN's result kept in the half type instead of widened; the batch norm
// reading it widened and rounding its dx at the store; the convolution's backward taking that dx
// as its operand; a batch norm's activated output rounded at its store and taken by the next
// convolution as its operand, and read widened as a folded ReLU's mask; a convolution's output
// with its bias and ReLU applied in place, for the next convolution; the ReLU's gradient for the
// convolution before it, and a convolution's for the ReLU before it. Each step equals, bit for
// bit, the path through fp32 maps (the result widened; the fp32 dx or x, which the convolution
// rounds itself), in NCHW and channels-last.
TEST_CASE("cuda half-precision maps around a convolution (its input, output, gradients): bit for bit the fp32 maps'") {
  for (DType half : kHalves)
    for (bool channels_last : {false, true}) {
      CAPTURE(dtype_name(half));
      CAPTURE(channels_last);
      Context g = gpu_in(half);
      g.deterministic = true;  // the same engine's two runs must give the same bits
      ops::Conv2dParams p;
      p.pad_h = p.pad_w = 1;
      p.format = channels_last ? ops::MemoryFormat::channels_last : ops::MemoryFormat::contiguous;
      const int64_t k = 12;
      const Shape x_shape = channels_last ? Shape{3, 15, 13, 8} : Shape{3, 8, 15, 13};
      const Shape y_shape = channels_last ? Shape{3, 15, 13, k} : Shape{3, k, 15, 13};
      const Tensor x = uniform(x_shape, 41).to(dev()), w = uniform({k, 8, 3, 3}, 42).to(dev());
      Tensor y32 = poisoned(y_shape, dev()), yh = Tensor::empty(y_shape, half, dev());
      ops::conv2d_forward(g, y32, x, w, nullptr, p);
      ops::conv2d_forward(g, yh, x, w, nullptr, p);
      CHECK(bitwise_equal(yh.to(Device::cpu()).cast(DType::f32), y32.to(Device::cpu())));

      // The batch norm on the half map and on its widened copy (as rows where channels-last).
      const Shape bn_shape = channels_last ? Shape{3 * 15 * 13, k} : y_shape;
      const Tensor xh = yh.view(bn_shape), x32 = y32.view(bn_shape);
      const Tensor gamma = uniform({k}, 43, 0.5f, 1.5f).to(dev()), beta = uniform({k}, 44).to(dev());
      Tensor m_a = poisoned({k}, dev()), s_a = poisoned({k}, dev()), m_b = poisoned({k}, dev()), s_b = poisoned({k}, dev());
      Tensor rm_a = Tensor::zeros({k}).to(dev()), rv_a = Tensor::zeros({k}).to(dev());
      Tensor rm_b = Tensor::zeros({k}).to(dev()), rv_b = Tensor::zeros({k}).to(dev());
      Tensor out_a = poisoned(bn_shape, dev()), out_b = poisoned(bn_shape, dev());
      ops::batch_norm_forward_train(g, out_a, m_a, s_a, rm_a, rv_a, xh, gamma, beta, 0.1f, 1e-5f, nullptr,
                                    ops::Epilogue::relu);
      ops::batch_norm_forward_train(g, out_b, m_b, s_b, rm_b, rv_b, x32, gamma, beta, 0.1f, 1e-5f, nullptr,
                                    ops::Epilogue::relu);
      for (auto [a, b] : std::initializer_list<std::pair<Tensor*, Tensor*>>{
               {&out_a, &out_b}, {&m_a, &m_b}, {&s_a, &s_b}, {&rm_a, &rm_b}, {&rv_a, &rv_b}})
        CHECK(bitwise_equal(a->to(Device::cpu()), b->to(Device::cpu())));
      Tensor eval_a = poisoned(bn_shape, dev()), eval_b = poisoned(bn_shape, dev());
      ops::batch_norm_forward_eval(g, eval_a, xh, gamma, beta, rm_a, rv_a, 1e-5f, ops::Epilogue::silu);
      ops::batch_norm_forward_eval(g, eval_b, x32, gamma, beta, rm_b, rv_b, 1e-5f, ops::Epilogue::silu);
      CHECK(bitwise_equal(eval_a.to(Device::cpu()), eval_b.to(Device::cpu())));
      // Its activated output in half (for a convolution after it): the fp32 output rounded.
      Tensor out_h = Tensor::empty(bn_shape, half, dev());
      ops::batch_norm_forward_train(g, out_h, m_a, s_a, rm_a, rv_a, xh, gamma, beta, 0.f, 1e-5f, nullptr,
                                    ops::Epilogue::relu);
      CHECK(bitwise_equal(out_h.to(Device::cpu()), out_b.to(Device::cpu()).cast(half)));
      Tensor eval_h = Tensor::empty(bn_shape, half, dev());
      ops::batch_norm_forward_eval(g, eval_h, xh, gamma, beta, rm_a, rv_a, 1e-5f, ops::Epilogue::silu);
      CHECK(bitwise_equal(eval_h.to(Device::cpu()), eval_b.to(Device::cpu()).cast(half)));

      const Tensor dy = uniform(bn_shape, 45).to(dev());
      Tensor dxh = Tensor::empty(bn_shape, half, dev()), dx32 = poisoned(bn_shape, dev());
      Tensor dg_a = Tensor::zeros({k}).to(dev()), db_a = Tensor::zeros({k}).to(dev());
      Tensor dg_b = Tensor::zeros({k}).to(dev()), db_b = Tensor::zeros({k}).to(dev());
      // A folded ReLU's output in half on one side, widened on the other: the same mask. (The mask
      // is the rounded output's: an fp16 output at most 2^-25 is 0 there, where fp32's passed.)
      Tensor out_w = poisoned(bn_shape, dev());
      ops::cast(g, out_w, out_h, 1.f);
      ops::batch_norm_backward(g, &dxh, &dg_a, &db_a, dy, xh, gamma, m_a, s_a, ops::DxMode::overwrite, &out_h, nullptr);
      ops::batch_norm_backward(g, &dx32, &dg_b, &db_b, dy, x32, gamma, m_b, s_b, ops::DxMode::overwrite, &out_w,
                               nullptr);
      CHECK(bitwise_equal(dxh.to(Device::cpu()), dx32.to(Device::cpu()).cast(half)));
      CHECK(bitwise_equal(dg_a.to(Device::cpu()), dg_b.to(Device::cpu())));
      CHECK(bitwise_equal(db_a.to(Device::cpu()), db_b.to(Device::cpu())));
      // A half dy (the dx of the convolution after the batch norm, cuDNN's result as it is), read
      // widened: every gradient the same as from its widened copy, planes and rows alike.
      Tensor dyh = Tensor::empty(bn_shape, half, dev()), dyw = poisoned(bn_shape, dev());
      ops::cast(g, dyh, dy, 1.f);
      ops::cast(g, dyw, dyh, 1.f);
      Tensor dxh2 = Tensor::empty(bn_shape, half, dev()), dxh3 = Tensor::empty(bn_shape, half, dev());
      Tensor dg_c = Tensor::zeros({k}).to(dev()), db_c = Tensor::zeros({k}).to(dev());
      Tensor dg_d = Tensor::zeros({k}).to(dev()), db_d = Tensor::zeros({k}).to(dev());
      ops::batch_norm_backward(g, &dxh2, &dg_c, &db_c, dyh, xh, gamma, m_a, s_a, ops::DxMode::overwrite, &out_h,
                               nullptr);
      ops::batch_norm_backward(g, &dxh3, &dg_d, &db_d, dyw, xh, gamma, m_a, s_a, ops::DxMode::overwrite, &out_h,
                               nullptr);
      CHECK(bitwise_equal(dxh2.to(Device::cpu()), dxh3.to(Device::cpu())));
      CHECK(bitwise_equal(dg_c.to(Device::cpu()), dg_d.to(Device::cpu())));
      CHECK(bitwise_equal(db_c.to(Device::cpu()), db_d.to(Device::cpu())));

      // The convolution's backward from the half dx, and from the fp32 one, which it rounds.
      Tensor gx_a = poisoned(x_shape, dev()), gw_a = Tensor::zeros(w.shape()).to(dev());
      Tensor gx_b = poisoned(x_shape, dev()), gw_b = Tensor::zeros(w.shape()).to(dev());
      ops::conv2d_backward(g, &gx_a, &gw_a, nullptr, dxh.view(y_shape), x, w, p, ops::DxMode::overwrite);
      ops::conv2d_backward(g, &gx_b, &gw_b, nullptr, dx32.view(y_shape), x, w, p, ops::DxMode::overwrite);
      CHECK(bitwise_equal(gx_a.to(Device::cpu()), gx_b.to(Device::cpu())));
      CHECK(bitwise_equal(gw_a.to(Device::cpu()), gw_b.to(Device::cpu())));

      // A half x (a batch norm's activated output before the convolution) is cuDNN's operand as it
      // is, its widened copy rounded by the convolution: the same forward (with a bias, into fp32)
      // and backward.
      Tensor xq = Tensor::empty(x_shape, half, dev()), xw = poisoned(x_shape, dev());
      ops::cast(g, xq, x, 1.f);
      ops::cast(g, xw, xq, 1.f);
      const Tensor b = uniform({k}, 46).to(dev());
      Tensor yq = poisoned(y_shape, dev()), yw = poisoned(y_shape, dev());
      ops::conv2d_forward(g, yq, xq, w, &b, p);
      ops::conv2d_forward(g, yw, xw, w, &b, p);
      CHECK(bitwise_equal(yq.to(Device::cpu()), yw.to(Device::cpu())));
      const Tensor dyq = uniform(y_shape, 47).to(dev());
      Tensor qx_a = poisoned(x_shape, dev()), qx_b = poisoned(x_shape, dev());
      Tensor qw_a = Tensor::zeros(w.shape()).to(dev()), qw_b = Tensor::zeros(w.shape()).to(dev());
      Tensor qb_a = Tensor::zeros({k}).to(dev()), qb_b = Tensor::zeros({k}).to(dev());
      ops::conv2d_backward(g, &qx_a, &qw_a, &qb_a, dyq, xq, w, p, ops::DxMode::overwrite);
      ops::conv2d_backward(g, &qx_b, &qw_b, &qb_b, dyq, xw, w, p, ops::DxMode::overwrite);
      CHECK(bitwise_equal(qx_a.to(Device::cpu()), qx_b.to(Device::cpu())));
      CHECK(bitwise_equal(qw_a.to(Device::cpu()), qw_b.to(Device::cpu())));
      CHECK(bitwise_equal(qb_a.to(Device::cpu()), qb_b.to(Device::cpu())));

      // A half y with the bias and the ReLU applied in place (a map the next convolution reads):
      // the fp32 y (bias added as it is widened, then the ReLU) rounded; without the bias too. The
      // ReLU's backward reads that output widened.
      // A biased convolution's half y for a batch norm (VGG-BN's): the bias added in place, the
      // fp32 output rounded.
      Tensor nb32 = poisoned(y_shape, dev()), nbh = Tensor::empty(y_shape, half, dev());
      ops::conv2d_forward(g, nb32, x, w, &b, p);
      ops::conv2d_forward(g, nbh, x, w, &b, p);
      CHECK(bitwise_equal(nbh.to(Device::cpu()), nb32.to(Device::cpu()).cast(half)));
      ops::Conv2dParams relu = p;
      relu.epilogue = ops::Epilogue::relu;
      for (const Tensor* bias : {&b, static_cast<const Tensor*>(nullptr)}) {
        CAPTURE(bias != nullptr);
        Tensor r32 = poisoned(y_shape, dev()), rh = Tensor::empty(y_shape, half, dev());
        ops::conv2d_forward(g, r32, x, w, bias, relu);
        ops::conv2d_forward(g, rh, x, w, bias, relu);
        CHECK(bitwise_equal(rh.to(Device::cpu()), r32.to(Device::cpu()).cast(half)));
        Tensor rw = poisoned(y_shape, dev()), gr_a = poisoned(y_shape, dev()), gr_b = poisoned(y_shape, dev());
        ops::cast(g, rw, rh, 1.f);
        ops::relu_backward(g, gr_a, dyq, rh, ops::DxMode::overwrite);
        ops::relu_backward(g, gr_b, dyq, rw, ops::DxMode::overwrite);
        CHECK(bitwise_equal(gr_a.to(Device::cpu()), gr_b.to(Device::cpu())));
        // Its dx in half (the convolution's dy): the fp32 dx rounded. The convolution's backward
        // from it, the bias gradient included, is the backward from its widened copy.
        Tensor gr_h = Tensor::empty(y_shape, half, dev()), gr_w = poisoned(y_shape, dev());
        ops::relu_backward(g, gr_h, dyq, rh, ops::DxMode::overwrite);
        CHECK(bitwise_equal(gr_h.to(Device::cpu()), gr_a.to(Device::cpu()).cast(half)));
        ops::cast(g, gr_w, gr_h, 1.f);
        const Tensor w0 = Tensor::zeros(w.shape()).to(dev()), b0 = uniform({k}, 49).to(dev());
        Tensor hx = poisoned(x_shape, dev()), hw = w0.clone(), hb = b0.clone();
        Tensor wx = poisoned(x_shape, dev()), ww = w0.clone(), wb = b0.clone();
        ops::conv2d_backward(g, &hx, &hw, &hb, gr_h, x, w, p, ops::DxMode::overwrite);
        ops::conv2d_backward(g, &wx, &ww, &wb, gr_w, x, w, p, ops::DxMode::overwrite);
        CHECK(bitwise_equal(hx.to(Device::cpu()), wx.to(Device::cpu())));
        CHECK(bitwise_equal(hw.to(Device::cpu()), ww.to(Device::cpu())));
        CHECK(bitwise_equal(hb.to(Device::cpu()), wb.to(Device::cpu())));
        // Added into (DxMode::add: a residual join's Module::backward_add) from the same half dy: what
        // dx held plus the written-over dx, bit for bit (the widening pass adds).
        const Tensor held = uniform(x_shape, 50).to(dev());
        Tensor added = held.clone(), sum_want = held.clone(), aw = w0.clone();
        ops::axpy(g, sum_want, 1.f, hx);
        ops::conv2d_backward(g, &added, &aw, nullptr, gr_h, x, w, p, ops::DxMode::add);
        CHECK(bitwise_equal(added.to(Device::cpu()), sum_want.to(Device::cpu())));
        // The convolution's dx in half (the dy of a ReLU before it): cuDNN's result as it is, which
        // the fp32 dx above was widened from; the ReLU's backward reads it widened, and writes its
        // own dx in half (for a convolution before it) as the fp32 one rounded.
        Tensor hxh = Tensor::empty(x_shape, half, dev()), hw2 = w0.clone();
        ops::conv2d_backward(g, &hxh, &hw2, nullptr, gr_h, x, w, p, ops::DxMode::overwrite);
        CHECK(bitwise_equal(hxh.to(Device::cpu()).cast(DType::f32), hx.to(Device::cpu())));
        CHECK(bitwise_equal(hw2.to(Device::cpu()), hw.to(Device::cpu())));
        Tensor ra = poisoned(x_shape, dev()), rb = poisoned(x_shape, dev()), rah = Tensor::empty(x_shape, half, dev());
        ops::relu_backward(g, ra, hxh, xq, ops::DxMode::overwrite);
        ops::relu_backward(g, rb, hx, xq, ops::DxMode::overwrite);
        ops::relu_backward(g, rah, hxh, xq, ops::DxMode::overwrite);
        CHECK(bitwise_equal(ra.to(Device::cpu()), rb.to(Device::cpu())));
        CHECK(bitwise_equal(rah.to(Device::cpu()), rb.to(Device::cpu()).cast(half)));
      }

      // A max pool of a half map (between an activated output and the next convolution): the
      // maximum of the widened values, rounded, with their argmax, as the host's path (widened
      // copies) computes them; from an fp32 map into a half one, the fp32 maximum rounded at the
      // same argmax (ops.def, "half-precision maps").
      ops::Pool2dParams pool;
      pool.kernel_h = pool.kernel_w = 3;
      pool.stride_h = pool.stride_w = 2;
      pool.pad_h = pool.pad_w = 1;
      pool.ceil_mode = true;
      pool.format = p.format;
      const Shape pooled = channels_last ? Shape{3, 8, 7, k} : Shape{3, k, 8, 7};
      const Tensor m32 = uniform(y_shape, 48).to(dev());
      Tensor mh = Tensor::empty(y_shape, half, dev());
      ops::cast(g, mh, m32, 1.f);
      Tensor py32 = poisoned(pooled, dev()), pa32 = Tensor::empty(pooled, DType::i32, dev());
      Tensor pyh = Tensor::empty(pooled, half, dev()), pah = Tensor::empty(pooled, DType::i32, dev());
      ops::max_pool2d_forward(g, py32, pa32, m32, pool);
      ops::max_pool2d_forward(g, pyh, pah, m32, pool);
      CHECK(bitwise_equal(pyh.to(Device::cpu()), py32.to(Device::cpu()).cast(half)));
      CHECK(bitwise_equal(pah.to(Device::cpu()), pa32.to(Device::cpu())));
      Context host = Context::cpu();
      host.compute = half;
      const Tensor mh_host = mh.to(Device::cpu());
      Tensor want_y = Tensor::empty(pooled, half), want_a = Tensor::empty(pooled, DType::i32);
      ops::max_pool2d_forward(host, want_y, want_a, mh_host, pool);
      ops::max_pool2d_forward(g, pyh, pah, mh, pool);
      CHECK(bitwise_equal(pyh.to(Device::cpu()), want_y));
      CHECK(bitwise_equal(pah.to(Device::cpu()), want_a));
      Tensor pyw = poisoned(pooled, dev()), want_w = Tensor::empty(pooled);
      ops::max_pool2d_forward(g, pyw, pah, mh, pool);
      ops::max_pool2d_forward(host, want_w, want_a, mh_host, pool);
      CHECK(bitwise_equal(pyw.to(Device::cpu()), want_w));
      // Its backward between a ReLU after a convolution and the next convolution: a half dy (that
      // convolution's dx) read widened, a half dx (the ReLU's dy) the fp32 sums rounded once, as
      // the host's path gives them; overlapping windows sum up to four gradients.
      const Tensor pdy32 = uniform(pooled, 49).to(dev());
      Tensor pdyh = Tensor::empty(pooled, half, dev());
      ops::cast(g, pdyh, pdy32, 1.f);
      const Tensor* const dys[] = {&pdy32, &pdyh};
      for (const Tensor* pdy : dys)
        for (bool half_dx : {false, true}) {
          CAPTURE(dtype_name(pdy->dtype()));
          CAPTURE(half_dx);
          Tensor pdx = (half_dx ? poisoned(y_shape).cast(half) : poisoned(y_shape)).to(dev());
          Tensor want_dx = Tensor::empty(y_shape, half_dx ? half : DType::f32);
          ops::max_pool2d_backward(g, pdx, *pdy, pah, pool, ops::DxMode::overwrite);
          ops::max_pool2d_backward(host, want_dx, pdy->to(Device::cpu()), want_a, pool, ops::DxMode::overwrite);
          CHECK(bitwise_equal(pdx.to(Device::cpu()), want_dx));
        }
    }
}

// A depthwise convolution (groups = C) on half-precision maps, as EfficientNet's runs in bf16/fp16
// since the twenty-sixth session (cuDNN's in those precisions: kernels/conv_paths.hpp): a half x is
// its operand as it is, equal to its widened copy, which the convolution rounds; its half dx is
// cuDNN's result as it is, which the fp32 path widened; the filter gradient the same. Bit for bit,
// with the deterministic engines. Not run yet.
TEST_CASE("cuda depthwise conv2d with half-precision maps: the fp32 maps' bits") {
  for (DType half : kHalves) {
    CAPTURE(dtype_name(half));
    Context g = gpu_in(half);
    g.deterministic = true;  // the same engine's two runs must give the same bits
    ops::Conv2dParams p;
    p.pad_h = p.pad_w = 2;
    p.stride_h = p.stride_w = 2;
    p.groups = 8;
    const int64_t n = 3, c = 8, h = 15, w = 13;
    const int64_t oh = ops::conv_out_size(h, 5, p.stride_h, p.pad_h, p.dilation_h);
    const int64_t ow = ops::conv_out_size(w, 5, p.stride_w, p.pad_w, p.dilation_w);
    const Tensor wt = uniform({c, 1, 5, 5}, 101).to(dev());
    Tensor xq = Tensor::empty({n, c, h, w}, half, dev()), xw = poisoned({n, c, h, w}, dev());
    ops::cast(g, xq, uniform({n, c, h, w}, 102).to(dev()), 1.f);
    ops::cast(g, xw, xq, 1.f);
    Tensor ya = poisoned({n, c, oh, ow}, dev()), yb = poisoned({n, c, oh, ow}, dev());
    ops::conv2d_forward(g, ya, xq, wt, nullptr, p);
    ops::conv2d_forward(g, yb, xw, wt, nullptr, p);
    CHECK(bitwise_equal(ya.to(Device::cpu()), yb.to(Device::cpu())));
    const Tensor dy = uniform({n, c, oh, ow}, 103).to(dev());
    Tensor dxh = Tensor::empty({n, c, h, w}, half, dev()), dx32 = poisoned({n, c, h, w}, dev());
    Tensor dw_a = Tensor::zeros(wt.shape()).to(dev()), dw_b = Tensor::zeros(wt.shape()).to(dev());
    ops::conv2d_backward(g, &dxh, &dw_a, nullptr, dy, xq, wt, p, ops::DxMode::overwrite);
    ops::conv2d_backward(g, &dx32, &dw_b, nullptr, dy, xw, wt, p, ops::DxMode::overwrite);
    CHECK(bitwise_equal(dxh.to(Device::cpu()).cast(DType::f32), dx32.to(Device::cpu())));
    CHECK(bitwise_equal(dw_a.to(Device::cpu()), dw_b.to(Device::cpu())));
  }
}
