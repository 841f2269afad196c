// Tests of the CPU conv2d against a direct 7-loop reference (forward and backward) for stride,
// padding, dilation, groups, depthwise (its own direct kernel), 1x1 and multi-tile shapes;
// accumulation; and bitwise equality across thread counts, also inside an outer OpenMP region.
// Every algorithm of kernels/cpu/conv2d_algos.hpp (dpx's own, oneDNN where built, the timed
// search) is checked on every case; oneDNN's dW is the one result that depends on the threads.
#include <doctest/doctest.h>
#include <omp.h>

#include <array>
#include <limits>

#include "kernels/cpu/conv2d_algos.hpp"
#include "kernels/ops.hpp"
#include "kernels/ref/ref_ops.hpp"
#include "tests/common/channels_last.hpp"
#include "tests/common/compare.hpp"
#include "tests/kernels/kernel_params.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::check_close;
using dpx::testing::conv_params;
using dpx::testing::randn;
using dpx::testing::to_channels_last;

namespace {

struct Case {
  int64_t N, C, H, W, K, kh, kw;
  ops::Conv2dParams p;
};

// The CPU convolution's algorithms, each on its own: --conv-algo dpx, onednn and search.
std::vector<cpu::ConvAlgo> algorithms() {
  std::vector<cpu::ConvAlgo> all{cpu::ConvAlgo::dpx};
  if (cpu::onednn_available())
    all.insert(all.end(), {cpu::ConvAlgo::onednn, cpu::ConvAlgo::winograd, cpu::ConvAlgo::search});
  return all;
}

// Uses one algorithm (and forgets every earlier choice) until it goes out of scope.
struct UseAlgo {
  explicit UseAlgo(cpu::ConvAlgo a) {
    cpu::set_conv_algo(a);
    cpu::clear_conv_choices();
  }
  ~UseAlgo() {
    cpu::set_conv_algo(cpu::ConvAlgo::automatic);
    cpu::clear_conv_choices();
  }
  UseAlgo(const UseAlgo&) = delete;
  UseAlgo& operator=(const UseAlgo&) = delete;
};

// Winograd's transforms round more than a direct sum: the kernel tests hold it to 20x the direct
// tolerance, at least 5e-4 (relative to max(|a|, |b|, 1); seen: up to 1.7e-4). search may pick
// it too.
double winograd_tolerance(cpu::ConvAlgo algo, double tol) {
  const bool may_be_winograd = algo == cpu::ConvAlgo::winograd || algo == cpu::ConvAlgo::search;
  return may_be_winograd ? std::max(20 * tol, 5e-4) : tol;
}

// Whether oneDNN has its Winograd convolution on this CPU (it needs AVX-512): where it has not,
// the shapes auto's rule gives Winograd run oneDNN's direct convolution. Call it outside UseAlgo.
bool winograd_on_this_cpu() {
  const UseAlgo use(cpu::ConvAlgo::winograd);
  Context ctx = Context::cpu(1);
  Tensor x = randn({1, 8, 8, 8}, 1), w = randn({8, 8, 3, 3}, 2), y = Tensor::empty({1, 8, 8, 8});
  ops::conv2d_forward(ctx, y, x, w, nullptr, conv_params(1, 1, 1, 1));
  return cpu::conv_choices().at(0).algo == "winograd";
}

// Forced oneDNN must have run every shape itself, not fallen back to dpx's kernels.
// (Forced Winograd runs where oneDNN has it: 3x3 stride 1 and more; the others fall back.)
void check_ran(cpu::ConvAlgo a) {
  if (a != cpu::ConvAlgo::onednn) return;
  for (const cpu::ConvChoice& c : cpu::conv_choices()) {
    INFO(c.shape, " ", c.pass, ": ", c.why);
    CHECK(c.algo == "onednn");
  }
}

struct Ref {
  std::vector<double> y, dx, dw, db;
};

// The reference kernels (kernels/ref/conv2d.cpp, the direct 7-loop convolution summed in
// double): y and the gradients for dy.
Ref reference(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
              int64_t OH, int64_t OW) {
  Context ctx = Context::cpu();
  Tensor y = Tensor::empty({c.N, c.K, OH, OW}), dx = Tensor::zeros(x.shape()),
         dw = Tensor::zeros(w.shape()), db = Tensor::zeros({c.K});
  ref::conv2d_forward(ctx, y, x, w, &b, c.p);
  ref::conv2d_backward(ctx, &dx, &dw, &db, dy, x, w, c.p, ops::DxMode::add);
  auto values = [](const Tensor& t) {
    const auto v = t.to_vector();
    return std::vector<double>(v.begin(), v.end());
  };
  return {values(y), values(dx), values(dw), values(db)};
}

// Epilogue::relu: the same call writes max(y, 0), bit for bit relu_forward of its plain output y
// (the GEMM paths fold it into the pass that places the outputs and adds the bias, the others run
// it after), and it did clamp something.
void check_relu_epilogue(Context& ctx, const Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b,
                         ops::Conv2dParams p) {
  INFO("Epilogue::relu, bias ", b != nullptr);
  p.epilogue = ops::Epilogue::relu;
  Tensor fused = Tensor::empty(y.shape()), want = Tensor::empty(y.shape());
  ops::fill(ctx, fused, std::numeric_limits<float>::quiet_NaN());
  ops::conv2d_forward(ctx, fused, x, w, b, p);
  ops::relu_forward(ctx, want, y);
  CHECK(bitwise_equal(fused, want));
  int64_t zeros = 0;
  for (float v : fused.to_vector()) zeros += v == 0.f;
  CHECK(zeros > 0);
}

// tol: relative to max(|a|, |b|, 1); float sums of a few hundred products stay well inside 1e-5,
// the large cases (1800 or 4608 terms per dW element) get 1e-4.
void check_against_reference(const Case& c, double tol = 1e-5) {
  // The reference once for every algorithm: at -O0 (the sanitized build's test files) it is most
  // of this file's time.
  const int64_t OH = ops::conv_out_size(c.H, c.kh, c.p.stride_h, c.p.pad_h, c.p.dilation_h);
  const int64_t OW = ops::conv_out_size(c.W, c.kw, c.p.stride_w, c.p.pad_w, c.p.dilation_w);
  const Tensor x = randn({c.N, c.C, c.H, c.W}, 1), w = randn({c.K, c.C / c.p.groups, c.kh, c.kw}, 2, 0.3f);
  const Tensor b = randn({c.K}, 3), dy = randn({c.N, c.K, OH, OW}, 4);
  const Ref r = reference(c, x, w, b, dy, OH, OW);
  for (cpu::ConvAlgo algo : algorithms()) {
    CAPTURE(std::string(cpu::conv_algo_name(algo)));
    const UseAlgo use(algo);
    const double tol_algo = winograd_tolerance(algo, tol);
    Context ctx = Context::cpu(2);
    Tensor y = Tensor::empty({c.N, c.K, OH, OW});
    ops::conv2d_forward(ctx, y, x, w, &b, c.p);
    INFO("y");
    check_close(y, r.y, tol_algo);
    check_relu_epilogue(ctx, y, x, w, &b, c.p);
    Tensor y_unbiased = Tensor::empty(y.shape());
    ops::conv2d_forward(ctx, y_unbiased, x, w, nullptr, c.p);
    check_relu_epilogue(ctx, y_unbiased, x, w, nullptr, c.p);

    Tensor dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape()), db = Tensor::zeros({c.K});
    ops::conv2d_backward(ctx, &dx, &dw, &db, dy, x, w, c.p, ops::DxMode::add);
    INFO("gradients");
    check_close(dx, r.dx, tol_algo);
    check_close(dw, r.dw, tol_algo);
    check_close(db, r.db, tol_algo);

    // A second call adds the same gradients again.
    ops::conv2d_backward(ctx, &dx, &dw, &db, dy, x, w, c.p, ops::DxMode::add);
    auto twice = [](std::vector<double> v) {
      for (double& e : v) e *= 2;
      return v;
    };
    INFO("gradients after the second call");
    check_close(dx, twice(r.dx), tol_algo);
    check_close(dw, twice(r.dw), tol_algo);
    check_close(db, twice(r.db), tol_algo);

    // DxMode::overwrite: what dx held before (NaN here) is written over, not added to.
    Tensor dx_over = Tensor::empty(x.shape());
    ops::fill(ctx, dx_over, std::numeric_limits<float>::quiet_NaN());
    ops::conv2d_backward(ctx, &dx_over, nullptr, nullptr, dy, x, w, c.p, ops::DxMode::overwrite);
    INFO("dx written over");
    check_close(dx_over, r.dx, tol_algo);
    check_ran(algo);
  }
}

}  // namespace

TEST_CASE("conv2d Epilogue::relu in the reference and the CPU kernels: max(y, 0), a NaN passing, channels-last too") {
  Tensor x = randn({2, 3, 6, 5}, 21), w = randn({4, 3, 3, 3}, 22, 0.3f), b = randn({4}, 23);
  b.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();  // channel 1's outputs are NaN
  for (bool reference : {true, false}) {
    for (ops::MemoryFormat format : {ops::MemoryFormat::contiguous, ops::MemoryFormat::channels_last}) {
      CAPTURE(reference);
      CAPTURE(format == ops::MemoryFormat::channels_last);
      Context ctx = reference ? Context::ref() : Context::cpu(2);
      ops::Conv2dParams p = conv_params(1, 1, 1, 1);
      p.format = format;
      const bool last = format == ops::MemoryFormat::channels_last;
      const Tensor in = last ? to_channels_last(x) : x;
      const Shape out_shape = last ? Shape{2, 6, 5, 4} : Shape{2, 4, 6, 5};
      Tensor plain = Tensor::empty(out_shape), want = Tensor::empty(out_shape), fused = Tensor::empty(out_shape);
      ops::conv2d_forward(ctx, plain, in, w, &b, p);
      ops::relu_forward(ctx, want, plain);
      p.epilogue = ops::Epilogue::relu;
      ops::conv2d_forward(ctx, fused, in, w, &b, p);
      CHECK(bitwise_equal(fused, want));
      int64_t nans = 0, zeros = 0;
      for (float v : fused.to_vector()) nans += v != v, zeros += v == 0.f;
      CHECK(nans == 2 * 6 * 5);
      CHECK(zeros > 0);
    }
  }
}

TEST_CASE("conv2d: hand values, 2x2 kernel on a 3x3 image") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::from({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor w = Tensor::from({1, 1, 2, 2}, {1, 0, 0, -1});
  Tensor b = Tensor::from({1}, {0.5f});
  Tensor y = Tensor::empty({1, 1, 2, 2});
  ops::conv2d_forward(ctx, y, x, w, &b, ops::Conv2dParams{});
  check_close(y, {-3.5, -3.5, -3.5, -3.5});  // x[i][j] - x[i+1][j+1] + 0.5
}

TEST_CASE("conv2d: stride 2, padding 1, 2 groups against the reference") {
  check_against_reference({2, 4, 7, 6, 6, 3, 3, conv_params(2, 1, 1, 2)});
}

TEST_CASE("conv2d: dilation 2, padding 2, non-square kernel and strides") {
  Case c{2, 3, 8, 9, 4, 3, 2, conv_params(1, 2, 2, 1)};
  c.p.stride_w = 2;
  c.p.pad_w = 1;
  c.p.dilation_w = 3;
  check_against_reference(c);
}

TEST_CASE("conv2d: depthwise (groups == channels) with a channel multiplier") {
  check_against_reference({2, 4, 6, 6, 8, 3, 3, conv_params(1, 1, 1, 4)});
}

// groups == C_in (one input channel per group) runs the direct depthwise kernel. Its dW element
// is a float sum of up to 3 * 225 products (in 16 lanes), whose rounding reaches 0.8e-5 of
// max(|dW|, 1) here: these cases get 2e-5.
constexpr double kDepthwiseTol = 2e-5;

TEST_CASE("conv2d depthwise: kernels 3 and 5, strides 1 and 2, padding 0, 1, 2, odd sizes") {
  for (int k : {3, 5})
    for (int stride : {1, 2})
      for (int pad : {0, 1, 2}) {
        CAPTURE(k);
        CAPTURE(stride);
        CAPTURE(pad);
        check_against_reference({3, 7, 13, 11, 7, k, k, conv_params(stride, pad, 1, 7)}, kDepthwiseTol);
      }
}

TEST_CASE("conv2d depthwise: dilation 2, rectangular kernels, strides and padding") {
  check_against_reference({3, 5, 15, 12, 5, 3, 3, conv_params(1, 2, 2, 5)}, kDepthwiseTol);
  check_against_reference({3, 5, 15, 12, 5, 5, 5, conv_params(2, 2, 2, 5)}, kDepthwiseTol);
  Case c{3, 6, 14, 17, 6, 3, 5, conv_params(2, 1, 2, 6)};
  c.p.stride_w = 3;
  c.p.pad_w = 2;
  c.p.dilation_w = 1;
  check_against_reference(c, kDepthwiseTol);
  // Stride larger than the kernel: phase planes no tap reads; 1x1 depthwise (a channel scale).
  check_against_reference({3, 4, 9, 10, 4, 2, 2, conv_params(3, 1, 1, 4)}, kDepthwiseTol);
  check_against_reference({3, 4, 9, 10, 4, 1, 1, conv_params(2, 0, 1, 4)}, kDepthwiseTol);
}

TEST_CASE("conv2d depthwise: channel multiplier 3, 7x7 kernel, planes over several blocks") {
  check_against_reference({3, 5, 11, 9, 15, 3, 3, conv_params(2, 1, 1, 5)}, kDepthwiseTol);
  // 49 taps: more than one pass of taps over each block.
  check_against_reference({3, 3, 12, 13, 3, 7, 7, conv_params(1, 3, 1, 3)}, kDepthwiseTol);
  // 72x70 outputs with pitch 72 and 48x49 with pitch 51 (multiplier 2): several forward row
  // blocks and several blocks per dx phase plane; up to 15120 terms per dW element, hence 1e-4.
  check_against_reference({3, 2, 72, 70, 2, 3, 3, conv_params(1, 1, 1, 2)}, 1e-4);
  check_against_reference({1, 2, 95, 97, 4, 5, 5, conv_params(2, 2, 1, 2)}, 1e-4);
}

TEST_CASE("conv2d depthwise: only dx or only dW, and no images") {
  for (cpu::ConvAlgo algo : algorithms()) {
    CAPTURE(std::string(cpu::conv_algo_name(algo)));
    const UseAlgo use(algo);
    const Case c{3, 6, 9, 8, 6, 3, 3, conv_params(2, 1, 1, 6)};
    Context ctx = Context::cpu(2);
    Tensor x = randn({3, 6, 9, 8}, 11), w = randn({6, 1, 3, 3}, 12), dy = randn({3, 6, 5, 4}, 13);
    const Ref r = reference(c, x, w, Tensor::zeros({6}), dy, 5, 4);
    Tensor dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape());
    ops::conv2d_backward(ctx, &dx, nullptr, nullptr, dy, x, w, c.p, ops::DxMode::add);
    ops::conv2d_backward(ctx, nullptr, &dw, nullptr, dy, x, w, c.p, ops::DxMode::add);
    check_close(dx, r.dx);
    check_close(dw, r.dw);
    Tensor x0 = Tensor::zeros({0, 6, 9, 8}), y0 = Tensor::zeros({0, 6, 5, 4});
    ops::conv2d_forward(ctx, y0, x0, w, nullptr, c.p);
    ops::conv2d_backward(ctx, nullptr, &dw, nullptr, y0, x0, w, c.p, ops::DxMode::add);
    check_close(dw, r.dw);
    check_ran(algo);
  }
}

TEST_CASE("conv2d: 1x1 stride 1 (no im2col) and 1x1 stride 2") {
  check_against_reference({3, 5, 4, 6, 3, 1, 1, conv_params(1, 0, 1, 1)});
  check_against_reference({2, 5, 5, 5, 3, 1, 1, conv_params(2, 0, 1, 1)});
}

TEST_CASE("conv2d: more output pixels than one column tile, 130 output channels") {
  // 16 * 9 rows per column: 896 pixels a tile, so 30x30 outputs take two tiles; 130 output
  // channels take two dW row blocks.
  check_against_reference({2, 16, 30, 30, 4, 3, 3, conv_params(1, 1, 1, 1)}, 1e-4);
  check_against_reference({2, 2, 5, 5, 130, 3, 3, conv_params(1, 0, 1, 1)});
}

TEST_CASE("conv2d: small images side by side, several per product") {
  // 4608 rows per column: 64-pixel column matrices. 1x1 outputs: all 8 images in one product.
  check_against_reference({8, 512, 3, 3, 512, 3, 3, conv_params(1, 0, 1, 1)}, 1e-4);
  // 3x3 outputs: at most 7 images per product, so 11 images make two chunks, of 6 and 5; 2
  // groups of 130 output channels, two row blocks each.
  check_against_reference({11, 512, 3, 3, 260, 3, 3, conv_params(1, 1, 1, 2)}, 1e-4);
  // Stride 2 (3x3 outputs of 6x5 images: chunks of 5 and 4; dx in blocks of 64, 64, 64 and 8
  // input channels), and a 1x1 convolution (x copied into the column matrix here: two chunks of
  // 10 images of 2x2).
  check_against_reference({9, 200, 6, 5, 140, 3, 3, conv_params(2, 1, 1, 1)}, 1e-4);
  check_against_reference({20, 4096, 2, 2, 130, 1, 1, conv_params(1, 0, 1, 1)}, 1e-4);
}

TEST_CASE("conv2d: dW over two partial slots of 10 small images each") {
  // dW is 256 x 4608 floats (4.7 MB): 64 MB would hold 13 slots, but there are two chunks of
  // images (at most 16 of 2x2 outputs per product: 10 + 10), so two slots.
  check_against_reference({20, 512, 2, 2, 256, 3, 3, conv_params(1, 1, 1, 1)}, 1e-4);
}

TEST_CASE("conv2d: bitwise identical for 1, 2 and 3 threads, also nested in an OpenMP region") {
  const bool avx512 = !cpu::onednn_available() || winograd_on_this_cpu();
  struct Out {
    Tensor y, dx, dw, db;
  };
  auto run = [](int threads, const Case& c, const Tensor& x, const Tensor& w, const Tensor& b,
                const Tensor& dy) {
    Context ctx = Context::cpu(threads);
    Out o{Tensor::empty(dy.shape()), Tensor::zeros(x.shape()), Tensor::zeros(w.shape()),
          Tensor::zeros(b.shape())};
    ops::conv2d_forward(ctx, o.y, x, w, &b, c.p);
    ops::conv2d_backward(ctx, &o.dx, &o.dw, &o.db, dy, x, w, c.p, ops::DxMode::add);
    return o;
  };
  for (const Case& c : {Case{4, 16, 20, 20, 24, 3, 3, conv_params(1, 1, 1, 1)},
                        Case{3, 8, 17, 17, 8, 5, 5, conv_params(2, 2, 1, 2)},
                        Case{8, 512, 3, 3, 512, 3, 3, conv_params(1, 0, 1, 1)},
                        Case{11, 512, 3, 3, 260, 3, 3, conv_params(1, 1, 1, 2)},
                        Case{3, 24, 33, 31, 24, 3, 3, conv_params(1, 1, 1, 24)},
                        Case{3, 20, 35, 29, 40, 5, 5, conv_params(2, 2, 1, 20)}}) {
    const int64_t OH = ops::conv_out_size(c.H, c.kh, c.p.stride_h, c.p.pad_h, c.p.dilation_h);
    const int64_t OW = ops::conv_out_size(c.W, c.kw, c.p.stride_w, c.p.pad_w, c.p.dilation_w);
    Tensor x = randn({c.N, c.C, c.H, c.W}, 5), w = randn({c.K, c.C / c.p.groups, c.kh, c.kw}, 6);
    Tensor b = randn({c.K}, 7), dy = randn({c.N, c.K, OH, OW}, 8);
    for (cpu::ConvAlgo algo : algorithms()) {
      if (algo == cpu::ConvAlgo::search) continue;  // its choice may differ between runs
      CAPTURE(std::string(cpu::conv_algo_name(algo)));
      const UseAlgo use(algo);
      Out one = run(1, c, x, w, b, dy);
      for (int threads : {2, 3}) {
        CAPTURE(threads);
        Out more = run(threads, c, x, w, b, dy);
        // Without AVX-512 oneDNN runs some shapes (grouped ones whose channels per group are off
        // its vector width) through its GEMM, which splits the sums by thread: norm-wise there.
        if (algo != cpu::ConvAlgo::dpx && !avx512) {
          CHECK(dpx::testing::norm_rel_diff(more.y, one.y) <= 1e-6);
          CHECK(dpx::testing::norm_rel_diff(more.dx, one.dx) <= 1e-6);
        } else {
          CHECK(bitwise_equal(one.y, more.y));
          CHECK(bitwise_equal(one.dx, more.dx));
        }
        // oneDNN splits dW's sum over images by thread (1600 terms): compared norm-wise, as every
        // reduction in another order (an element that nearly cancels differed by 1.1e-4 relative to
        // itself under Winograd on one Xeon, 2026-11-26, while the whole agreed to rounding).
        if (algo != cpu::ConvAlgo::dpx)
          CHECK(dpx::testing::norm_rel_diff(more.dw, one.dw) <= 1e-5);
        else
          CHECK(bitwise_equal(one.dw, more.dw));
        CHECK(bitwise_equal(one.db, more.db));
      }
      // Two "ranks" as outer OpenMP threads, each running the kernel with 2 threads of its own
      // (nesting enabled, so the inner regions really get 2 threads each).
      std::array<Out, 2> ranks;
      const int levels = omp_get_max_active_levels();
      omp_set_max_active_levels(2);
  #pragma omp parallel for num_threads(2)
      for (int r = 0; r < 2; ++r) ranks[r] = run(2, c, x, w, b, dy);
      omp_set_max_active_levels(levels);
      // (oneDNN runs on one thread inside a parallel region: the same as `one`.)
      for (const Out& o : ranks) {
        CHECK(bitwise_equal(one.y, o.y));
        CHECK(bitwise_equal(one.dw, o.dw));
        CHECK(bitwise_equal(one.dx, o.dx));
      }
      check_ran(algo);
    }
  }
}

TEST_CASE("conv2d: bad shapes and parameters are clear errors") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::zeros({1, 4, 5, 5}), w = Tensor::zeros({6, 3, 3, 3}),
         y = Tensor::zeros({1, 6, 3, 3});
  CHECK_THROWS_WITH_AS(ops::conv2d_forward(ctx, y, x, w, nullptr, ops::Conv2dParams{}),
                       doctest::Contains("do not fit 1 groups"), Error);
  Tensor w4 = Tensor::zeros({6, 4, 3, 3}), y_bad = Tensor::zeros({1, 6, 4, 4});
  CHECK_THROWS_WITH_AS(ops::conv2d_forward(ctx, y_bad, x, w4, nullptr, ops::Conv2dParams{}),
                       doctest::Contains("y has shape (1, 6, 4, 4), expected (1, 6, 3, 3)"), Error);
  Tensor w_big = Tensor::zeros({6, 4, 7, 7});
  CHECK_THROWS_WITH_AS(ops::conv2d_forward(ctx, y, x, w_big, nullptr, ops::Conv2dParams{}),
                       doctest::Contains("does not fit input (1, 4, 5, 5)"), Error);
  ops::Conv2dParams zero_stride;
  zero_stride.stride_h = 0;
  CHECK_THROWS_WITH_AS(ops::conv2d_forward(ctx, y, x, w4, nullptr, zero_stride),
                       doctest::Contains("must be positive"), Error);
}

TEST_CASE("conv2d: auto's rule, shape by shape") {
  if (!cpu::onednn_available()) return;  // without oneDNN every shape runs dpx's kernels
  const char* winograd = winograd_on_this_cpu() ? "winograd" : "onednn";
  const UseAlgo use(cpu::ConvAlgo::automatic);
  Context ctx = Context::cpu(2);
  auto run = [&](int64_t C, int64_t HW, int64_t K, int64_t k, int stride, int pad) {
    const ops::Conv2dParams p = conv_params(stride, pad, 1, 1);
    const int64_t O = ops::conv_out_size(HW, static_cast<int>(k), stride, pad, 1);
    Tensor x = randn({2, C, HW, HW}, 1), w = randn({K, C, k, k}, 2, 0.3f), y = Tensor::empty({2, K, O, O});
    Tensor dy = randn({2, K, O, O}, 4), dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape());
    ops::conv2d_forward(ctx, y, x, w, nullptr, p);
    ops::conv2d_backward(ctx, &dx, &dw, nullptr, dy, x, w, p, ops::DxMode::add);
  };
  run(32, 16, 64, 1, 1, 0);   // 1x1 on a 16x16 plane: dpx's kernels (x is the product's columns)
  run(32, 32, 64, 1, 2, 0);   // 1x1 stride 2 onto 16x16: the same
  run(32, 7, 64, 1, 1, 0);    // 1x1 on a 7x7 plane: oneDNN's direct convolution
  run(16, 16, 16, 3, 1, 1);   // 3x3 stride 1 on a 16x16 plane: Winograd
  run(16, 7, 16, 3, 1, 1);    // ... and on 7x7
  run(16, 4, 16, 3, 1, 1);    // ... but not on 4x4: direct
  run(16, 16, 16, 3, 2, 1);   // 3x3 stride 2: direct
  run(3, 16, 16, 3, 1, 1);    // a 3x3 stem (3 input channels): dpx's kernels
  const std::vector<cpu::ConvChoice> choices = cpu::conv_choices();
  REQUIRE(choices.size() == 16);
  const char* expected[] = {"dpx",    "dpx",    "dpx",    "dpx",    "onednn", "onednn", winograd, winograd,
                            winograd, winograd, "onednn", "onednn", "onednn", "onednn", "dpx",    "dpx"};
  for (size_t i = 0; i < choices.size(); ++i) {
    INFO(choices[i].shape, " ", choices[i].pass, ": ", choices[i].why);
    CHECK(choices[i].algo == std::string(expected[i]));
  }
}

// Under a memory budget Winograd's scratch, which grows with the images, is held to a workspace
// limit, as cuDNN's algorithms are: past it the shape runs oneDNN's direct convolution, and the
// choice says why; the values are the direct convolution's.
TEST_CASE("conv2d: Winograd past the workspace limit runs the direct convolution instead") {
  if (!cpu::onednn_available() || !winograd_on_this_cpu()) return;  // no Winograd to limit
  const UseAlgo use(cpu::ConvAlgo::automatic);
  Context ctx = Context::cpu(2);
  const ops::Conv2dParams p = conv_params(1, 1, 1, 1);
  Tensor x = randn({4, 16, 16, 16}, 1), w = randn({16, 16, 3, 3}, 2, 0.3f), y = Tensor::empty({4, 16, 16, 16});
  Tensor dy = randn({4, 16, 16, 16}, 4), dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape());
  auto run = [&] {
    ops::conv2d_forward(ctx, y, x, w, nullptr, p);
    ops::conv2d_backward(ctx, &dx, &dw, nullptr, dy, x, w, p, ops::DxMode::add);
    return cpu::conv_choices();
  };
  std::vector<cpu::ConvChoice> free = run();
  REQUIRE(free.size() == 2);
  CHECK(free[0].algo == "winograd");
  CHECK(free[1].algo == "winograd");
  cpu::clear_conv_choices();
  cpu::set_conv_workspace_limit(1024);  // far under any Winograd scratch
  const std::vector<cpu::ConvChoice> limited = run();
  cpu::set_conv_workspace_limit(0);
  REQUIRE(limited.size() == 2);
  for (const cpu::ConvChoice& c : limited) {
    INFO(c.pass, ": ", c.why);
    CHECK(c.algo == "onednn");
    CHECK(c.why.find("over the workspace limit of 0 MiB (--memory-budget / 8)") != std::string::npos);
  }
  CHECK(cpu::conv_workspace_limit() == 0);
}

// Under a rule a shape's first call is also its trial: the first implementation that runs does so
// into the call's own outputs, once. (It once ran into zeroed copies of dx and dW and then again
// for real: the first backward held a second dx, VGG-16's first at 224x224 13 MB an image more
// than every later step, and the warm-up's peak capped the largest batch.)
TEST_CASE("conv2d: a shape's first call under the rule needs no more memory than the next, and adds once") {
  if (!cpu::onednn_available()) return;  // the rule then has no trial
  const UseAlgo use(cpu::ConvAlgo::automatic);
  Context ctx = Context::cpu(2);
  const ops::Conv2dParams p = conv_params(1, 1, 1, 1);
  Tensor x = randn({4, 16, 32, 32}, 1), w = randn({16, 16, 3, 3}, 2, 0.3f), y = Tensor::empty({4, 16, 32, 32});
  Tensor dy = randn({4, 16, 32, 32}, 4), dx = Tensor::zeros(x.shape()), dw = Tensor::zeros(w.shape());
  // The bytes a call takes beyond what was live before it.
  auto extra = [&](auto&& call) {
    reset_window_peaks();
    const size_t before = host_bytes_in_use();
    call();
    return window_peak_bytes(Device::cpu()) - before;
  };
  auto forward = [&] { ops::conv2d_forward(ctx, y, x, w, nullptr, p); };
  auto backward = [&] { ops::conv2d_backward(ctx, &dx, &dw, nullptr, dy, x, w, p, ops::DxMode::add); };
  const size_t first_forward = extra(forward), first_backward = extra(backward);
  const Tensor dx1 = dx.clone(), dw1 = dw.clone();
  const size_t next_forward = extra(forward), next_backward = extra(backward);
  REQUIRE(cpu::conv_choices().size() == 2);
  CHECK(cpu::conv_choices()[1].algo != "dpx");  // oneDNN's: Winograd, or direct without AVX-512
  CHECK(first_forward <= next_forward);
  CHECK(first_backward <= next_backward);  // before: next + dx's and dW's bytes
  // The first backward added its gradients once: the second doubles them.
  for (auto [now, once] : {std::pair{dx, dx1}, std::pair{dw, dw1}}) {
    std::vector<double> twice;
    for (float v : once.to_vector()) twice.push_back(2.0 * v);
    check_close(now, twice, 1e-5);
  }
}
