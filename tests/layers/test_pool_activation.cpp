// Layers without parameters: MaxPool2d, AvgPool2d (ceil_mode, count_include_pad),
// AdaptiveAvgPool2d, ReLU, Dropout and Flatten — gradient checks and hand-computed values.
#include <doctest/doctest.h>

#include <cmath>

#include "layers/dropout.hpp"
#include "layers/flatten.hpp"
#include "layers/pooling.hpp"
#include "layers/activation.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {
Tensor iota(const Shape& shape, float start = 1.f) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}
}  // namespace

TEST_CASE("MaxPool2d: gradients, with padding and ceil_mode") {
  Context ctx = Context::cpu();
  // distinct_values: every value 0.1 from any other, so no window has a near-tie at eps 1e-2.
  nn::MaxPool2d plain(2);
  CHECK_GRADIENTS(ctx, plain, distinct_values({2, 2, 4, 4}, 1));
  nn::MaxPool2d padded_ceil(3, 2, 1, /*ceil_mode=*/true);
  CHECK_GRADIENTS(ctx, padded_ceil, distinct_values({1, 2, 6, 5}, 2));
  nn::MaxPool2d rect(ops::Pool2dParams{.kernel_h = 2, .kernel_w = 3, .stride_h = 1, .stride_w = 2,
                                       .pad_h = 1, .pad_w = 1, .ceil_mode = true});
  CHECK_GRADIENTS(ctx, rect, distinct_values({1, 1, 4, 6}, 3));
  // Its backward writes dx over (DxMode::overwrite): no zero-fill before it.
  const Tensor y = padded_ceil.forward(ctx, distinct_values({1, 2, 6, 5}, 2));
  const auto calls = op_calls([&] { padded_ceil.backward(ctx, distinct_values(y.shape(), 4)); });
  CHECK(calls.count("fill") == 0);
  CHECK(calls.at("max_pool2d_backward") == 1);
  // So do the average pools.
  nn::AvgPool2d avg(3, 2, 1, /*ceil_mode=*/true);
  nn::AdaptiveAvgPool2d adaptive(2, 3);
  for (nn::Module* m : std::initializer_list<nn::Module*>{&avg, &adaptive}) {
    CAPTURE(m->describe());
    const Tensor ym = m->forward(ctx, distinct_values({1, 2, 6, 5}, 5));
    const auto avg_calls = op_calls([&] { m->backward(ctx, distinct_values(ym.shape(), 6)); });
    CHECK(avg_calls.count("fill") == 0);
  }
}

TEST_CASE("MaxPool2d: the caller skips tied windows") {
  Context ctx = Context::cpu();
  nn::MaxPool2d pool(2);
  Tensor x = distinct_values({1, 1, 4, 4}, 4);
  x.data<float>()[0] = x.data<float>()[1] = 9.f;  // a tie for the max of the first window
  GradCheckOptions opt;
  opt.skip_input = [](int64_t i) { return i == 0 || i == 1; };
  auto r = gradcheck(ctx, pool, x, opt);
  CHECK_MESSAGE(r.ok(), r.summary());
  CHECK(r.skipped == 2);
}

TEST_CASE("MaxPool2d: ceil_mode values and output size as PyTorch") {
  Context ctx = Context::cpu();
  Tensor x = iota({1, 1, 3, 3});
  nn::MaxPool2d floor_pool(2), ceil_pool(2, 2, 0, true);
  CHECK(floor_pool.forward(ctx, x).to_vector() == std::vector<float>{5});
  CHECK(ceil_pool.forward(ctx, x).to_vector() == std::vector<float>{5, 6, 8, 9});
  // torchvision's SqueezeNet stage: 3x3 stride 2 with ceil_mode on 55x55 gives 27x27.
  nn::MaxPool2d squeeze(3, 2, 0, true);
  CHECK(squeeze.forward(ctx, Tensor::zeros({1, 1, 55, 55})).shape() == Shape{1, 1, 27, 27});
  CHECK(squeeze.describe() == "MaxPool2d(kernel_size=3, stride=2, padding=0, dilation=1, ceil_mode=True)");
  CHECK_THROWS_WITH_AS(nn::MaxPool2d(2, 2, 2), doctest::Contains("at most half the kernel"), dpx::Error);
  CHECK_THROWS_WITH_AS(floor_pool.forward(ctx, Tensor::zeros({1, 4, 4})), doctest::Contains("given input (1, 4, 4)"),
                       dpx::Error);
}

TEST_CASE("AvgPool2d: gradients for both count_include_pad settings, with ceil_mode") {
  Context ctx = Context::cpu();
  nn::AvgPool2d include(3, 2, 1, /*ceil_mode=*/true, /*count_include_pad=*/true);
  CHECK_GRADIENTS(ctx, include, uniform({2, 2, 4, 5}, 5));
  nn::AvgPool2d exclude(3, 2, 1, /*ceil_mode=*/true, /*count_include_pad=*/false);
  CHECK_GRADIENTS(ctx, exclude, uniform({2, 2, 4, 5}, 6));
  nn::AvgPool2d plain(2);
  CHECK_GRADIENTS(ctx, plain, uniform({1, 3, 4, 4}, 7));
}

TEST_CASE("AvgPool2d: divisors as PyTorch at padded and ceil_mode edges") {
  Context ctx = Context::cpu();
  Tensor x3 = iota({1, 1, 3, 3});
  // Window (0, 0) of a 3x3 window at padding 1 holds 1, 2, 4, 5: 12 over 9 places or 4 values.
  auto inc = nn::AvgPool2d(3, 2, 1, false, true).forward(ctx, x3).to_vector();
  auto exc = nn::AvgPool2d(3, 2, 1, false, false).forward(ctx, x3).to_vector();
  CHECK(inc[0] == doctest::Approx(12.0 / 9));
  CHECK(exc[0] == doctest::Approx(3.0));
  CHECK(inc[1] == doctest::Approx(16.0 / 9));  // 2, 3, 5, 6; the pad column counts
  CHECK(exc[1] == doctest::Approx(4.0));
  // ceil_mode: the last window covers row/column 3 and the padding after it, and runs past
  // the padding; PyTorch's divisor counts input and padding but not what lies beyond.
  Tensor x4 = iota({1, 1, 4, 4});
  auto ceil_inc = nn::AvgPool2d(3, 2, 1, true, true).forward(ctx, x4);
  CHECK(ceil_inc.shape() == Shape{1, 1, 3, 3});
  CHECK(ceil_inc.to_vector()[8] == doctest::Approx(16.0 / 4));
  auto ceil_exc = nn::AvgPool2d(3, 2, 1, true, false).forward(ctx, x4);
  CHECK(ceil_exc.to_vector()[8] == doctest::Approx(16.0));
  // Without padding, ceil_mode windows are averaged over what they cover.
  CHECK(nn::AvgPool2d(2, 2, 0, true).forward(ctx, x3).to_vector() == std::vector<float>{3, 4.5f, 7.5f, 9});
}

TEST_CASE("AdaptiveAvgPool2d: gradients and PyTorch's overlapping bins") {
  Context ctx = Context::cpu();
  nn::AdaptiveAvgPool2d pool(3, 2);
  CHECK_GRADIENTS(ctx, pool, uniform({2, 2, 5, 7}, 8));
  // Rows [0,2), [1,4), [3,5); columns [0,4), [3,7) of x[r][c] = 7 r + c.
  auto y = pool.forward(ctx, iota({1, 1, 5, 7}, 0.f)).to_vector();
  CHECK(y.size() == 6);
  CHECK(y[0] == doctest::Approx(0.5 * 7 + 1.5));
  CHECK(y[3] == doctest::Approx(2.0 * 7 + 4.5));
  CHECK(y[5] == doctest::Approx(3.5 * 7 + 4.5));
  nn::AdaptiveAvgPool2d global(1, 1);
  CHECK(global.forward(ctx, iota({1, 1, 2, 2})).to_vector() == std::vector<float>{2.5f});
  CHECK(global.describe() == "AdaptiveAvgPool2d(output_size=(1, 1))");
}

TEST_CASE("ReLU: gradients away from the kink, and skipping the kink when told") {
  Context ctx = Context::cpu();
  nn::ReLU relu;
  CHECK_GRADIENTS(ctx, relu, away_from_zero({3, 4, 2}, 9));
  GradCheckOptions opt;
  Tensor x = away_from_zero({2, 5}, 10);
  x.data<float>()[3] = 0.f;
  x.data<float>()[7] = -0.5f * opt.eps;
  opt.skip_input = [&](int64_t i) { return std::abs(x.data<float>()[i]) < 2 * opt.eps; };
  auto r = gradcheck(ctx, relu, x, opt);
  CHECK_MESSAGE(r.ok(), r.summary());
  CHECK(r.skipped == 2);
  // Without the skip the check does fail there: it is not a check that cannot fail.
  CHECK_FALSE(gradcheck(ctx, relu, x).ok());
  CHECK(relu.forward(ctx, Tensor::from({3}, {-1, 0, 2})).to_vector() == std::vector<float>{0, 0, 2});
}

TEST_CASE("Dropout: gradients with a fixed mask in training") {
  Context ctx = Context::cpu();
  Rng rng(11);
  nn::Dropout drop(0.4f, rng);
  CHECK_GRADIENTS(ctx, drop, uniform({3, 5}, 12));
  drop.eval();
  CHECK_GRADIENTS(ctx, drop, uniform({3, 5}, 12));
}

TEST_CASE("Dropout: masks differ per step, are reproducible from the seed, scale by 1/(1-p)") {
  Context ctx = Context::cpu();
  const float p = 0.3f;
  Tensor x = uniform({100, 200}, 13, 0.5f, 1.f);
  Rng rng(21);
  nn::Dropout drop(p, rng), sibling(p, rng);
  Tensor y1 = drop.forward(ctx, x), y2 = drop.forward(ctx, x);
  CHECK(y1.to_vector() != y2.to_vector());
  CHECK(sibling.forward(ctx, x).to_vector() != y1.to_vector());
  Rng same(21);
  nn::Dropout again(p, same);
  CHECK(again.forward(ctx, x).to_vector() == y1.to_vector());
  CHECK(again.forward(ctx, x).to_vector() == y2.to_vector());
  // A clone carries the stream: it draws what the original would draw next.
  auto copy = drop.clone();
  CHECK(copy->forward(ctx, x).to_vector() == drop.forward(ctx, x).to_vector());
  drop.reseed(Rng(99));
  CHECK(drop.forward(ctx, x).to_vector() != copy->forward(ctx, x).to_vector());

  auto xv = x.to_vector(), yv = y1.to_vector();
  int64_t kept = 0, misscaled = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0.f) continue;
    ++kept;
    if (!(rel_diff(yv[i], xv[i] / (1 - p), /*floor=*/0) <= 1e-6)) ++misscaled;  // a NaN is misscaled
  }
  CHECK(misscaled == 0);
  double rate = double(kept) / double(xv.size());  // 20000 draws: std 0.0032
  CHECK(rate == doctest::Approx(1 - p).epsilon(0.02));
}

TEST_CASE("Dropout: eval and p = 0 are the identity, p = 1 drops everything") {
  Context ctx = Context::cpu();
  Rng rng(1);
  Tensor x = uniform({4, 3}, 14);
  nn::Dropout drop(0.5f, rng);
  drop.eval();
  Tensor y = drop.forward(ctx, x);
  CHECK(y.raw() == x.raw());
  Tensor dy = uniform({4, 3}, 15);
  Tensor dx = drop.backward(ctx, dy);
  CHECK(dx.raw() != dy.raw());
  CHECK(dx.to_vector() == dy.to_vector());
  nn::Dropout none(0.f, rng);
  CHECK(none.forward(ctx, x).to_vector() == x.to_vector());
  nn::Dropout all(1.f, rng);
  CHECK(all.forward(ctx, x).to_vector() == std::vector<float>(12, 0.f));
  CHECK(all.backward(ctx, dy).to_vector() == std::vector<float>(12, 0.f));
  CHECK(all.describe() == "Dropout(p=1, inplace=False)");
  CHECK_THROWS_WITH_AS(nn::Dropout(1.5f, rng), doctest::Contains("Dropout(p=1.5)"), dpx::Error);
}

TEST_CASE("Flatten: a view forward, a fresh gradient back") {
  Context ctx = Context::cpu();
  nn::Flatten flat;
  Tensor x = uniform({2, 3, 2, 2}, 16);
  Tensor y = flat.forward(ctx, x);
  CHECK(y.shape() == Shape{2, 12});
  CHECK(y.raw() == x.raw());
  CHECK_GRADIENTS(ctx, flat, x);
  CHECK_THROWS_WITH_AS(flat.forward(ctx, Tensor::zeros({5})), doctest::Contains("given input (5)"), dpx::Error);
}
