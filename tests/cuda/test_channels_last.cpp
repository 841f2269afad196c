// GPU tests of --memory-format channels_last: cuDNN's convolutions on (N, H, W, C) maps with the
// filter permuted to (K, kH, kW, C / groups), the bias and its gradient by dpx's row kernels, the
// channels-last max and adaptive average pooling kernels, each against the reference's contiguous
// result permuted by the test's own loop (tests/common/channels_last.hpp); then narrow resnet50's,
// efficientnet_b0's and densenet121's training steps in channels_last against the contiguous ones
// on the GPU.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "layers/loss.hpp"
#include "layers/model.hpp"
#include "tests/common/channels_last.hpp"
#include "tests/cuda/gpu_test_util.hpp"
#include "tests/kernels/kernel_params.hpp"
#include "zoo/cnn.hpp"
#include "zoo/efficientnet.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

constexpr ops::MemoryFormat kLast = ops::MemoryFormat::channels_last;

// The pooled shape of xs (N, C, H, W) under p.
Shape pooled(const Shape& xs, const ops::Pool2dParams& p) {
  return {xs[0], xs[1], ops::conv_out_size(xs[2], p.kernel_h, p.stride_h, p.pad_h, 1, p.ceil_mode),
          ops::conv_out_size(xs[3], p.kernel_w, p.stride_w, p.pad_w, 1, p.ceil_mode)};
}

struct ConvCase {
  Shape x, w;
  ops::Conv2dParams p;
};

}  // namespace

TEST_CASE("cuda conv2d channels_last: forward, bias, and every gradient match the reference's, permuted") {
  Context c = reference(), g = gpu();
  uint64_t seed = 300;
  for (const ConvCase& k : std::vector<ConvCase>{
           {{3, 5, 13, 13}, {7, 5, 3, 3}, conv_params(1, 1, 1, 1)},   // 3x3 "same"
           {{2, 6, 13, 13}, {9, 2, 3, 3}, conv_params(2, 1, 1, 3)},   // groups, stride 2
           {{3, 8, 13, 13}, {8, 1, 3, 3}, conv_params(1, 1, 1, 8)},   // depthwise: cuDNN's in channels_last
           {{2, 4, 15, 13}, {3, 4, 3, 3}, conv_params(1, 2, 2, 1)},   // dilation
           {{3, 16, 9, 9}, {32, 16, 1, 1}, conv_params(2, 0, 1, 1)},  // 1x1 projection, stride 2
           {{2, 3, 29, 27}, {16, 3, 7, 7}, conv_params(2, 3, 1, 1)},  // a ResNet stem, shrunk
       }) {
    CAPTURE(k.x[1]);
    CAPTURE(k.p.groups);
    const Shape ys = {k.x[0], k.w[0], ops::conv_out_size(k.x[2], int(k.w[2]), k.p.stride_h, k.p.pad_h, k.p.dilation_h),
                      ops::conv_out_size(k.x[3], int(k.w[3]), k.p.stride_w, k.p.pad_w, k.p.dilation_w)};
    const Tensor x = uniform(k.x, ++seed), w = uniform(k.w, ++seed), b = uniform({k.w[0]}, ++seed);
    const Tensor dy = uniform(ys, ++seed);
    Tensor y = Tensor::empty(ys);
    ops::conv2d_forward(c, y, x, w, &b, k.p);
    Tensor dx = uniform(k.x, ++seed), dw = uniform(k.w, ++seed), db = uniform({k.w[0]}, ++seed);
    Tensor gdx = to_channels_last(dx).to(dev()), gdw = dw.to(dev()), gdb = db.to(dev());
    ops::conv2d_backward(c, &dx, &dw, &db, dy, x, w, k.p, ops::DxMode::add);

    ops::Conv2dParams q = k.p;
    q.format = kLast;
    const Tensor gx = to_channels_last(x).to(dev()), gw = w.to(dev()), gb = b.to(dev());
    const Tensor gdy = to_channels_last(dy).to(dev());
    Tensor gy = poisoned(to_channels_last(y).shape(), dev());
    ops::conv2d_forward(g, gy, gx, gw, &gb, q);
    CHECK(norm_rel_diff(gy, to_channels_last(y)) <= 1e-5);
    ops::Conv2dParams relu = q;  // the ReLU epilogue: a pass in place after the bias's
    relu.epilogue = ops::Epilogue::relu;
    Tensor fused = poisoned(gy.shape(), dev()), clamped = poisoned(gy.shape(), dev());
    ops::conv2d_forward(g, fused, gx, gw, &gb, relu);
    ops::relu_forward(g, clamped, gy);
    CHECK(bitwise_equal(fused, clamped));
    ops::conv2d_backward(g, &gdx, &gdw, &gdb, gdy, gx, gw, q, ops::DxMode::add);
    CHECK(norm_rel_diff(gdx, to_channels_last(dx)) <= 1e-5);
    CHECK(norm_rel_diff(gdw, dw) <= 1e-5);  // the weight gradient keeps (K, C / groups, kH, kW)
    CHECK(norm_rel_diff(gdb, db) <= 1e-5);
    // dx written over (beta 0): the NaN it held is gone.
    Tensor over = Tensor::zeros(k.x);
    ops::conv2d_backward(c, &over, nullptr, nullptr, dy, x, w, k.p, ops::DxMode::overwrite);
    Tensor gover = poisoned(gx.shape(), dev());
    ops::conv2d_backward(g, &gover, nullptr, nullptr, gdy, gx, gw, q, ops::DxMode::overwrite);
    CHECK(norm_rel_diff(gover, to_channels_last(over)) <= 1e-5);
  }
}

TEST_CASE("cuda max, average and adaptive average pooling on channels_last maps equal the reference's") {
  Context c = reference(), g = gpu();
  const Shape xs{3, 5, 13, 11};
  Tensor x = uniform(xs, 400, -4.f, 4.f);  // whole numbers: ties, where the first maximum must win
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(static_cast<int>(x.data<float>()[i]));
  for (ops::Pool2dParams p : {pool_params(3, 2, 1), pool_params(3, 2, 1, true), pool_params(2, 2, 0, true),
                              pool_params(3, 1, 0)}) {
    CAPTURE(p.kernel_h);
    CAPTURE(p.ceil_mode);
    const Shape ys = pooled(xs, p);
    Tensor y = Tensor::empty(ys), am = Tensor::empty(ys, DType::i32);
    ops::max_pool2d_forward(c, y, am, x, p);
    const Tensor dy = uniform(ys, 401);
    Tensor dx = uniform(xs, 402);
    Tensor gdx = to_channels_last(dx).to(dev());
    ops::max_pool2d_backward(c, dx, dy, am, p, ops::DxMode::add);
    p.format = kLast;
    Tensor gy = poisoned(to_channels_last(y).shape(), dev());
    Tensor gam = Tensor::empty(gy.shape(), DType::i32, dev());
    ops::max_pool2d_forward(g, gy, gam, to_channels_last(x).to(dev()), p);
    CHECK(bitwise_equal(gy, to_channels_last(y)));
    CHECK(bitwise_equal(gam, to_channels_last(am)));
    ops::max_pool2d_backward(g, gdx, to_channels_last(dy).to(dev()), gam, p, ops::DxMode::add);
    CHECK(bitwise_equal(gdx, to_channels_last(dx)));
    // Written over (DxMode::overwrite) from NaN-poisoned memory: what adding into zeros gives.
    Tensor gzero = Tensor::zeros(gdx.shape()).to(dev()), gover = poisoned(gdx.shape(), dev());
    ops::max_pool2d_backward(g, gzero, to_channels_last(dy).to(dev()), gam, p, ops::DxMode::add);
    ops::max_pool2d_backward(g, gover, to_channels_last(dy).to(dev()), gam, p, ops::DxMode::overwrite);
    CHECK(bitwise_equal(gover, gzero));
  }
  for (ops::Pool2dParams p : {pool_params(2, 2, 0), pool_params(3, 2, 1, true), pool_params(3, 2, 1, true, false)}) {
    CAPTURE(p.kernel_h);
    CAPTURE(p.count_include_pad);
    const Shape ys = pooled(xs, p);
    Tensor y = Tensor::empty(ys);
    ops::avg_pool2d_forward(c, y, x, p);
    const Tensor dy = uniform(ys, 405);
    Tensor dx = uniform(xs, 406);
    Tensor gdx = to_channels_last(dx).to(dev());
    ops::avg_pool2d_backward(c, dx, dy, p, ops::DxMode::add);
    p.format = kLast;
    Tensor gy = poisoned(to_channels_last(y).shape(), dev());
    ops::avg_pool2d_forward(g, gy, to_channels_last(x).to(dev()), p);
    CHECK(norm_rel_diff(gy, to_channels_last(y)) <= 1e-6);
    ops::avg_pool2d_backward(g, gdx, to_channels_last(dy).to(dev()), p, ops::DxMode::add);
    CHECK(norm_rel_diff(gdx, to_channels_last(dx)) <= 1e-6);
    Tensor gzero = Tensor::zeros(gdx.shape()).to(dev()), gover = poisoned(gdx.shape(), dev());
    ops::avg_pool2d_backward(g, gzero, to_channels_last(dy).to(dev()), p, ops::DxMode::add);
    ops::avg_pool2d_backward(g, gover, to_channels_last(dy).to(dev()), p, ops::DxMode::overwrite);
    CHECK(bitwise_equal(gover, gzero));
  }
  for (const Shape& out : {Shape{1, 1}, Shape{4, 3}, Shape{7, 7}}) {
    CAPTURE(out[0]);
    Tensor y = Tensor::empty({xs[0], xs[1], out[0], out[1]});
    ops::adaptive_avg_pool2d_forward(c, y, x, ops::MemoryFormat::contiguous);
    const Tensor dy = uniform(y.shape(), 403);
    Tensor dx = uniform(xs, 404);
    Tensor gdx = to_channels_last(dx).to(dev());
    ops::adaptive_avg_pool2d_backward(c, dx, dy, ops::MemoryFormat::contiguous, ops::DxMode::add);
    Tensor gy = poisoned(to_channels_last(y).shape(), dev());
    ops::adaptive_avg_pool2d_forward(g, gy, to_channels_last(x).to(dev()), kLast);
    CHECK(norm_rel_diff(gy, to_channels_last(y)) <= 1e-6);  // sums in double: the order hardly shows
    ops::adaptive_avg_pool2d_backward(g, gdx, to_channels_last(dy).to(dev()), kLast, ops::DxMode::add);
    CHECK(norm_rel_diff(gdx, to_channels_last(dx)) <= 1e-6);
    Tensor gzero = Tensor::zeros(gdx.shape()).to(dev()), gover = poisoned(gdx.shape(), dev());
    ops::adaptive_avg_pool2d_backward(g, gzero, to_channels_last(dy).to(dev()), kLast, ops::DxMode::add);
    ops::adaptive_avg_pool2d_backward(g, gover, to_channels_last(dy).to(dev()), kLast, ops::DxMode::overwrite);
    CHECK(bitwise_equal(gover, gzero));
  }
}

TEST_CASE("cuda: narrow resnet50, efficientnet_b0 and densenet121 steps in channels_last match the contiguous ones") {
  Context g = gpu();
  zoo::ModelOptions o;
  o.num_classes = 5;
  o.image_size = 32;
  o.seed = 9;
  for (const std::string family : {"resnet50", "efficientnet_b0", "densenet121"}) {
    CAPTURE(family);
    std::unique_ptr<nn::Module> root;
    if (family == "resnet50") {
      zoo::ResNetConfig rc = zoo::resnet_config(50);
      rc.base_planes = 8;
      rc.layers = {1, 2, 1, 1};
      root = zoo::build_resnet(rc, o);
    } else if (family == "efficientnet_b0") {  // three stages: depthwise 3x3 and 5x5 (cuDNN's here), SE
      zoo::EfficientNetConfig ec = zoo::efficientnet_b0_config();
      ec.stages.resize(3);
      root = zoo::build_efficientnet(ec, o);
    } else {  // the block's buffer as rows, batch norm on its prefix, average-pooling transitions
      zoo::DenseNetConfig dc = zoo::densenet_config(121);
      dc.growth = 4;
      dc.blocks = {2, 2, 1, 1};
      dc.init_features = 8;
      root = zoo::build_densenet(dc, o);
    }
    nn::Model contiguous(std::move(root), dev()), last = contiguous.clone(dev());
    last.set_memory_format(kLast);
    const Tensor x = uniform({4, 3, 32, 32}, 500).to(dev());
    Tensor labels = Tensor::empty({4}, DType::i64);
    for (int64_t i = 0; i < 4; ++i) labels.data<int64_t>()[i] = i % 5;
    labels = labels.to(dev());
    Tensor logits[2];
    nn::Model* models[2] = {&contiguous, &last};
    for (int i = 0; i < 2; ++i) {
      nn::Model& m = *models[i];
      m.train();
      m.zero_grad(g);
      nn::CrossEntropyLoss loss;
      logits[i] = m.forward(g, x);
      (void)loss.forward_tensor(g, logits[i], labels);
      m.backward(g, loss.backward(g));
    }
    CHECK(norm_rel_diff(logits[1], logits[0].to(Device::cpu())) <= 1e-5);
    CHECK(norm_rel_diff(last.flat_grads(), contiguous.flat_grads().to(Device::cpu())) <= 1e-4);
  }
}
