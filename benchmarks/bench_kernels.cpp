// Micro-benchmarks of the CPU kernels that dominate training time: square GEMM, conv2d
// forward/backward on ResNet-like shapes and depthwise conv2d on EfficientNet-B0's, each at 1 and
// 2 threads, next to the machine's FMA peak, each convolution with dpx's own kernels (algo:0),
// oneDNN's direct convolution (algo:1) and oneDNN's Winograd (algo:2, 3x3 stride 1). GFLOP/s counts 2 FLOPs per multiply-add; conv2d backward
// computes dx, dW and db (twice the forward's multiply-adds). Batch norm (training forward and
// backward, ResNet-50's 256 x 56 x 56 at batch 8) is memory-bound: GB/s counts each tensor it
// reads or writes once (x and y; x, dy and dx), the least traffic it could have; max pooling's
// forward likewise.
#include <benchmark/benchmark.h>
#include <omp.h>

#include "core/rng.hpp"
#include "kernels/cpu/conv2d_algos.hpp"
#include "kernels/ops.hpp"

namespace {

using namespace dpx;

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed);
  fill_uniform(t, rng, -1.f, 1.f);
  return t;
}

void set_gflops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The machine's limit: independent fused multiply-adds on 16-float vectors (AVX-512 with
// -march=native), 12 accumulators per thread to cover the FMA latency. ISO C++ mode turns off
// fused contraction, so this function turns it back on. Args: threads.
__attribute__((optimize("fp-contract=fast"))) void BM_PeakFma(benchmark::State& state) {
  typedef float v16 __attribute__((vector_size(64)));
  const int threads = static_cast<int>(state.range(0));
  constexpr int kAcc = 12, kIters = 1 << 16;
  for (auto _ : state) {
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      v16 acc[kAcc], x, y;
      for (int i = 0; i < 16; ++i) {
        x[i] = 1.0f + 1e-7f * i;
        y[i] = 0.999999f;
      }
      for (auto& a : acc) a = x;
      for (int it = 0; it < kIters; ++it)
        for (auto& a : acc) a = a * y + x;
      for (auto& a : acc)
        for (int i = 0; i < 16; ++i) sink += a[i];
    }
    benchmark::DoNotOptimize(sink);
  }
  set_gflops(state, 2.0 * 16 * kAcc * double(kIters) * threads);
}
BENCHMARK(BM_PeakFma)->ArgNames({"threads"})->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// Args: n, threads.
void BM_Gemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  Context ctx = Context::cpu(static_cast<int>(state.range(1)));
  Tensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2), c = Tensor::empty({n, n});
  for (auto _ : state) {
    ops::matmul(ctx, c, a, b, false, false, 1.f, 0.f);
    benchmark::DoNotOptimize(c.raw());
  }
  set_gflops(state, 2.0 * n * n * n);
}
BENCHMARK(BM_Gemm)
    ->ArgNames({"n", "threads"})
    ->ArgsProduct({{256, 512, 1024}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

struct ConvShape {
  int64_t N, C, H, W, K, k;
  int stride, pad;
  int groups = 1;
};
// Indexed by the first benchmark argument.
const ConvShape kConvShapes[] = {
    {8, 64, 56, 56, 64, 3, 1, 1},    // ResNet layer1 3x3
    {8, 128, 28, 28, 128, 3, 1, 1},  // ResNet layer2 3x3
    {2, 3, 224, 224, 64, 7, 2, 3},   // ResNet stem 7x7 stride 2
    {8, 256, 56, 56, 64, 1, 1, 0},   // ResNet-50 bottleneck 1x1 (no im2col)
    {8, 256, 4, 4, 256, 3, 1, 1},    // ResNet layer3 3x3 at 64x64 input (16 pixels an image)
    {8, 512, 2, 2, 512, 3, 1, 1},    // ResNet layer4 3x3 at 64x64 input (4 pixels an image)
    {8, 128, 16, 16, 32, 3, 1, 1},   // DenseNet dense layer 3x3 at 64x64 input
    // 224x224 inputs (issue "CPU speed at 224"): VGG's planes from 224 down to 14, ResNet's 7,
    // Swin's patch embedding (4x4 stride 4).
    {1, 64, 224, 224, 64, 3, 1, 1},  // VGG-16 conv1_2
    {2, 128, 112, 112, 128, 3, 1, 1},  // VGG-16 conv2_2
    {2, 256, 56, 56, 256, 3, 1, 1},  // VGG-16 conv3_x
    {2, 512, 28, 28, 512, 3, 1, 1},  // VGG-16 conv4_x
    {8, 512, 14, 14, 512, 3, 1, 1},  // VGG-16 conv5_x
    {8, 512, 7, 7, 512, 3, 1, 1},    // ResNet layer4 3x3
    {8, 3, 224, 224, 96, 4, 4, 0},   // Swin-T patch embedding
};
// Depthwise (groups == C, w (C, 1, k, k)): EfficientNet-B0's MBConv layers for batch 8 of 64x64
// images (the model step of RESULTS.md), and its first stage at 224x224.
const ConvShape kDepthwiseShapes[] = {
    {8, 96, 32, 32, 96, 3, 1, 1, 96},      // 3x3 stride 1
    {8, 144, 16, 16, 144, 5, 2, 2, 144},   // 5x5 stride 2
    {8, 240, 8, 8, 240, 5, 1, 2, 240},     // 5x5, 8x8 planes
    {8, 672, 4, 4, 672, 5, 1, 2, 672},     // 5x5, 4x4 planes
    {8, 1152, 2, 2, 1152, 5, 1, 2, 1152},  // 5x5, 2x2 planes
    {8, 32, 112, 112, 32, 3, 1, 1, 32},    // 3x3, 112x112 planes (224x224 input)
};

struct ConvSetup {
  ops::Conv2dParams p;
  Tensor x, w, b, y;
  double macs;
  explicit ConvSetup(const ConvShape& s) {
    p.stride_h = p.stride_w = s.stride;
    p.pad_h = p.pad_w = s.pad;
    p.groups = s.groups;
    const int64_t OH = ops::conv_out_size(s.H, static_cast<int>(s.k), s.stride, s.pad, 1);
    const int64_t OW = ops::conv_out_size(s.W, static_cast<int>(s.k), s.stride, s.pad, 1);
    x = random_tensor({s.N, s.C, s.H, s.W}, 3);
    w = random_tensor({s.K, s.C / s.groups, s.k, s.k}, 4);
    b = random_tensor({s.K}, 5);
    y = random_tensor({s.N, s.K, OH, OW}, 6);
    macs = static_cast<double>(s.N) * s.K * OH * OW * (s.C / s.groups) * s.k * s.k;
  }
};

void conv_label(benchmark::State& state, const ConvShape& s) {
  state.SetLabel("N=" + std::to_string(s.N) + " " + std::to_string(s.C) + "->" +
                 std::to_string(s.K) + " " + std::to_string(s.H) + "x" + std::to_string(s.W) +
                 " k" + std::to_string(s.k) + " s" + std::to_string(s.stride) +
                 (s.groups > 1 ? " groups=" + std::to_string(s.groups) : ""));
}

// The third benchmark argument, the algorithm (--conv-algo): 0 dpx's own kernels, 1 oneDNN's
// direct convolution, 2 oneDNN's Winograd (3x3 stride 1 only; other shapes are skipped).
void use_algo(benchmark::State& state, const ConvShape& s) {
  const int64_t algo = state.range(2);
  if (algo > 0 && !cpu::onednn_available()) state.SkipWithError("this dpx was built without oneDNN");
  if (algo == 2 && !(s.k == 3 && s.stride == 1 && s.groups == 1))
    state.SkipWithError("Winograd: 3x3 stride-1 convolutions only");
  cpu::set_conv_algo(!cpu::onednn_available() || algo == 0 ? cpu::ConvAlgo::dpx
                     : algo == 1                            ? cpu::ConvAlgo::onednn
                                                            : cpu::ConvAlgo::winograd);
  cpu::clear_conv_choices();  // a shape's choice is kept: forget the last benchmark's
}

void conv_forward(benchmark::State& state, const ConvShape& s) {
  use_algo(state, s);
  Context ctx = Context::cpu(static_cast<int>(state.range(1)));
  ConvSetup c(s);
  for (auto _ : state) {
    ops::conv2d_forward(ctx, c.y, c.x, c.w, &c.b, c.p);
    benchmark::DoNotOptimize(c.y.raw());
  }
  set_gflops(state, 2.0 * c.macs);
  conv_label(state, s);
}

void conv_backward(benchmark::State& state, const ConvShape& s) {
  use_algo(state, s);
  Context ctx = Context::cpu(static_cast<int>(state.range(1)));
  ConvSetup c(s);
  Tensor dx = Tensor::zeros(c.x.shape()), dw = Tensor::zeros(c.w.shape()),
         db = Tensor::zeros({s.K});
  for (auto _ : state) {
    ops::conv2d_backward(ctx, &dx, &dw, &db, c.y, c.x, c.w, c.p, ops::DxMode::add);
    benchmark::DoNotOptimize(dw.raw());
  }
  set_gflops(state, 4.0 * c.macs);  // dx and dW each cost the forward's multiply-adds
  conv_label(state, s);
}

// Args: shape index, threads.
void BM_Conv2dForward(benchmark::State& state) { conv_forward(state, kConvShapes[state.range(0)]); }
void BM_Conv2dBackward(benchmark::State& state) {
  conv_backward(state, kConvShapes[state.range(0)]);
}
void BM_DepthwiseConv2dForward(benchmark::State& state) {
  conv_forward(state, kDepthwiseShapes[state.range(0)]);
}
void BM_DepthwiseConv2dBackward(benchmark::State& state) {
  conv_backward(state, kDepthwiseShapes[state.range(0)]);
}

BENCHMARK(BM_Conv2dForward)
    ->ArgNames({"shape", "threads", "algo"})
    ->ArgsProduct({benchmark::CreateDenseRange(0, 13, 1), {1, 2}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Conv2dBackward)
    ->ArgNames({"shape", "threads", "algo"})
    ->ArgsProduct({benchmark::CreateDenseRange(0, 13, 1), {1, 2}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Args: threads.
void BM_BatchNorm(benchmark::State& state) {
  Context ctx = Context::cpu(static_cast<int>(state.range(0)));
  const Shape shape{8, 256, 56, 56};
  const int64_t C = shape[1];
  Tensor x = random_tensor(shape, 1), dy = random_tensor(shape, 2), y = Tensor::empty(shape);
  Tensor gamma = random_tensor({C}, 3), beta = random_tensor({C}, 4);
  Tensor mean = Tensor::empty({C}), invstd = Tensor::empty({C}), rm = Tensor::zeros({C}),
         rv = Tensor::zeros({C}), dx = Tensor::zeros(shape), dgamma = Tensor::zeros({C}),
         dbeta = Tensor::zeros({C});
  for (auto _ : state) {
    ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::none);
    ops::batch_norm_backward(ctx, &dx, &dgamma, &dbeta, dy, x, gamma, mean, invstd, ops::DxMode::add,
                             nullptr, nullptr);
    benchmark::DoNotOptimize(dx.raw());
  }
  state.counters["GB/s"] = benchmark::Counter(5.0 * 4 * x.numel() * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("N=8 C=256 56x56, forward (train) + backward");
}
BENCHMARK(BM_BatchNorm)->ArgNames({"threads"})->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// Batch norm + ReLU (or SiLU), a training step's forward and backward as the layers run them:
// fused 0 is four ops (batch norm, the activation, its backward, batch norm backward), fused 1 two
// (the batch norm's Epilogue::relu or ::silu and its backward with relu_out or silu_beta), as
// nn::forward_children/backward_children. Args: fused, threads.
void batch_norm_activation(benchmark::State& state, bool silu) {
  Context ctx = Context::cpu(static_cast<int>(state.range(1)));
  const bool fused = state.range(0) != 0;
  const Shape shape{8, 256, 56, 56};
  const int64_t C = shape[1];
  Tensor x = random_tensor(shape, 1), dy = random_tensor(shape, 2), y = Tensor::empty(shape);
  Tensor h = Tensor::empty(shape), g = Tensor::empty(shape), dx = Tensor::empty(shape);
  Tensor gamma = random_tensor({C}, 3), beta = random_tensor({C}, 4);
  Tensor mean = Tensor::empty({C}), invstd = Tensor::empty({C}), rm = Tensor::zeros({C}),
         rv = Tensor::zeros({C}), dgamma = Tensor::zeros({C}), dbeta = Tensor::zeros({C});
  const auto overwrite = ops::DxMode::overwrite;
  for (auto _ : state) {
    if (fused) {
      ops::batch_norm_forward_train(ctx, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                    silu ? ops::Epilogue::silu : ops::Epilogue::relu);
      ops::batch_norm_backward(ctx, &dx, &dgamma, &dbeta, dy, x, gamma, mean, invstd, overwrite,
                               silu ? nullptr : &y, silu ? &beta : nullptr);
    } else {
      ops::batch_norm_forward_train(ctx, h, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                    ops::Epilogue::none);
      if (silu) {
        ops::silu_forward(ctx, y, h);
        ops::silu_backward(ctx, g, dy, h, overwrite);
      } else {
        ops::relu_forward(ctx, y, h);
        ops::relu_backward(ctx, g, dy, y, overwrite);
      }
      ops::batch_norm_backward(ctx, &dx, &dgamma, &dbeta, g, x, gamma, mean, invstd, overwrite,
                               nullptr, nullptr);
    }
    benchmark::DoNotOptimize(dx.raw());
  }
  const std::string act = silu ? "SiLU" : "ReLU";
  state.SetLabel(fused ? "N=8 C=256 56x56, BN+" + act + " fused, forward (train) + backward"
                       : "N=8 C=256 56x56, BN then " + act + ", forward (train) + backward");
}
void BM_BatchNormRelu(benchmark::State& state) { batch_norm_activation(state, false); }
void BM_BatchNormSilu(benchmark::State& state) { batch_norm_activation(state, true); }
BENCHMARK(BM_BatchNormRelu)
    ->ArgNames({"fused", "threads"})
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BatchNormSilu)
    ->ArgNames({"fused", "threads"})
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Max pooling's forward (the value and the arg-max), memory-bound: GB/s counts x read once and
// y and the arg-max written once. Shapes: SqueezeNet's 3x3 stride 2 (16 x 64 x 63 x 63 at
// 128x128), ResNet's stem pool 3x3 stride 2 padding 1 (16 x 64 x 112 x 112 at 224x224), VGG's
// 2x2 stride 2 (16 x 128 x 112 x 112). Args: shape, threads.
void BM_MaxPoolForward(benchmark::State& state) {
  struct Case {
    Shape x;
    int kernel, stride, pad;
    const char* label;
  };
  const Case cases[] = {{{16, 64, 63, 63}, 3, 2, 0, "squeezenet 16x64x63x63 k3 s2"},
                        {{16, 64, 112, 112}, 3, 2, 1, "resnet stem 16x64x112x112 k3 s2 p1"},
                        {{16, 128, 112, 112}, 2, 2, 0, "vgg 16x128x112x112 k2 s2"}};
  const Case& c = cases[state.range(0)];
  Context ctx = Context::cpu(static_cast<int>(state.range(1)));
  ops::Pool2dParams p;
  p.kernel_h = p.kernel_w = c.kernel;
  p.stride_h = p.stride_w = c.stride;
  p.pad_h = p.pad_w = c.pad;
  const int64_t oh = ops::conv_out_size(c.x[2], c.kernel, c.stride, c.pad, 1, false);
  const int64_t ow = ops::conv_out_size(c.x[3], c.kernel, c.stride, c.pad, 1, false);
  Tensor x = random_tensor(c.x, 1), y = Tensor::empty({c.x[0], c.x[1], oh, ow});
  Tensor argmax = Tensor::empty(y.shape(), DType::i32);
  for (auto _ : state) {
    ops::max_pool2d_forward(ctx, y, argmax, x, p);
    benchmark::DoNotOptimize(y.raw());
  }
  state.counters["GB/s"] = benchmark::Counter(4.0 * (x.numel() + 2 * y.numel()) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(c.label);
}
BENCHMARK(BM_MaxPoolForward)
    ->ArgNames({"shape", "threads"})
    ->ArgsProduct({{0, 1, 2}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_DepthwiseConv2dForward)
    ->ArgNames({"shape", "threads", "algo"})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DepthwiseConv2dBackward)
    ->ArgNames({"shape", "threads", "algo"})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
