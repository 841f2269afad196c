// Tests of the per-sample transforms: bilinear resize against values PyTorch 1.13 computes
// (F.interpolate(mode='bilinear', align_corners=False, antialias=False), printed by the snippet
// quoted below), normalise, grey -> RGB, and chains of them over a data set.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/data/transforms.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/errors.hpp"

using dpx::Shape;
using namespace dpx::data;
using dpx::testing::check_close;

using dpx::testing::contains;
using dpx::testing::error_of;

namespace {

// The inputs of the PyTorch reference: x[i] = ((i * 37) % 11) / 10, row-major.
std::vector<float> pattern(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 37) % 11) / 10.f;
  return v;
}

std::vector<float> resized(const std::vector<float>& in, int64_t h, int64_t w, int64_t oh, int64_t ow) {
  std::vector<float> out(static_cast<size_t>(oh * ow));
  resize_bilinear(out.data(), in.data(), 1, h, w, oh, ow);
  return out;
}

// A tiny data set: sample i is `shape` filled with i + j / 100 (j = element), label i % 3.
class RampDataset : public Dataset {
 public:
  RampDataset(int64_t n, Shape shape) : n_(n), shape_(std::move(shape)) {}
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return 3; }
  void get(int64_t i, float* image, int64_t* label) const override {
    for (int64_t j = 0; j < dpx::shape_numel(shape_); ++j) image[j] = static_cast<float>(i) + static_cast<float>(j) / 100.f;
    *label = i % 3;
  }
  std::string describe() const override { return "ramp"; }

 private:
  int64_t n_;
  Shape shape_;
};

}  // namespace

// Reference values, from:
//   import torch, torch.nn.functional as F
//   x = torch.tensor([((i*37) % 11) / 10 for i in range(H*W)]).view(1, 1, H, W)
//   F.interpolate(x, size=(OH, OW), mode='bilinear', align_corners=False).flatten().tolist()
TEST_CASE("resize: 2x2 -> 4x4 bilinear equals PyTorch's") {
  // src = (dst + 0.5) * in/out - 0.5, clamped at 0: rows/columns 0.0, 0.25, 0.75, 1.0 (clamped).
  check_close(resized({1, 2, 3, 4}, 2, 2, 4, 4),
              {1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0});
}

TEST_CASE("resize: uneven up- and down-scaling equal PyTorch's") {
  check_close(resized(pattern(15), 3, 5, 4, 7),
              {0.0f, 0.22857144f, 0.51428574f, 0.79999995f, 0.29999995f, 0.27142861f, 0.5f,
               0.5625f, 0.39821428f, 0.38928574f, 0.67500001f, 0.66607141f, 0.53928572f, 0.375f,
               0.82499999f, 0.42499998f, 0.23928574f, 0.52500004f, 0.81071430f, 0.62499994f, 0.22500001f,
               0.69999999f, 0.29999998f, 0.11428573f, 0.40000004f, 0.68571430f, 0.49999994f, 0.10000000f});
  // Down-scaling without antialiasing samples between two taps only.
  check_close(resized(pattern(25), 5, 5, 2, 3),
              {0.53333330f, 0.64999998f, 0.49166670f, 0.58333331f, 0.15000004f, 0.81666666f});
  // The studies' 28x28 -> 224x224 (docs/ARCHITECTURE.md, Studies), at a few places.
  std::vector<float> big = resized(pattern(28 * 28), 28, 28, 224, 224);
  const std::vector<std::pair<int, float>> want = {{0, 0.0f}, {1, 0.0f}, {7, 0.175f}, {100, 0.425f},
                                                   {1000, 0.6375f}, {30000, 0.2625f}, {50175, 0.8f}};
  for (auto [i, v] : want) {
    CAPTURE(i);
    CHECK(dpx::testing::abs_diff(big[i], v) <= 1e-6);
  }
}

TEST_CASE("resize: the same size is the identity; channels are resized independently") {
  std::vector<float> in = pattern(12);
  check_close(resized(in, 3, 4, 3, 4), in, 0.f);
  std::vector<float> two(8), out(2 * 16);
  for (int i = 0; i < 4; ++i) two[i] = static_cast<float>(i + 1), two[4 + i] = 10.f * static_cast<float>(i + 1);
  resize_bilinear(out.data(), two.data(), 2, 2, 2, 4, 4);
  CHECK(out[5] == doctest::Approx(1.75));
  CHECK(out[16 + 5] == doctest::Approx(17.5));
}

TEST_CASE("normalize: (x - mean) / std per channel, one value for all channels") {
  auto n = normalize({0.5f, 1.f}, {2.f, 0.25f});
  Shape s = {2, 1, 2};
  CHECK(n->output_shape(s) == s);
  std::vector<float> in = {1.5f, -0.5f, 1.f, 2.f}, out(4);
  n->apply(out.data(), in.data(), s);
  check_close(out, {0.5f, -0.5f, 0.f, 4.f}, 0.f);
  auto one = normalize({0.2860f}, {0.3530f});
  std::vector<float> g = {0.2860f}, go(1);
  one->apply(go.data(), g.data(), {1, 1, 1});
  CHECK(go[0] == 0.f);
  CHECK(contains(error_of([] { normalize({0.5f}, {0.f}); }), "standard deviations must be positive"));
  CHECK(contains(error_of([] { normalize({0.5f, 0.5f}, {1.f}); }), "as many means as standard deviations"));
  CHECK(contains(error_of([&] { n->output_shape({3, 2, 2}); }), "2 means for 3-channel samples"));
}

TEST_CASE("grey_to_rgb: replicates the one channel; refuses colour input") {
  auto t = grey_to_rgb(3);
  CHECK(t->output_shape({1, 2, 2}) == Shape{3, 2, 2});
  std::vector<float> in = {1, 2, 3, 4}, out(12);
  t->apply(out.data(), in.data(), {1, 2, 2});
  check_close(out, {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}, 0.f);
  CHECK(contains(error_of([&] { t->output_shape({3, 2, 2}); }), "needs 1-channel (grey) samples, got 3"));
}

TEST_CASE("TransformedDataset: the studies' chain 28x28 grey -> normalised 224x224x3") {
  auto base = std::make_shared<RampDataset>(5, Shape{1, 28, 28});
  auto chain = model_input_transforms(base->sample_shape(), 3, 224, 224, 0.5f, 0.25f);
  REQUIRE(chain.size() == 3);
  auto ds = with_transforms(base, chain);
  CHECK(ds->sample_shape() == Shape{3, 224, 224});
  CHECK(ds->size() == 5);
  CHECK(ds->num_classes() == 3);
  CHECK(contains(ds->describe(), "ramp -> normalize(mean [0.5], std [0.25]) -> resize(224x224, bilinear) -> grey_to_rgb(3)"));
  std::vector<float> got(3 * 224 * 224), raw(28 * 28), want(224 * 224);
  int64_t label = -1;
  ds->get(4, got.data(), &label);
  CHECK(label == 1);
  // The same computed step by step: resize first, then normalise (equal up to rounding).
  base->get(4, raw.data(), &label);
  resize_bilinear(want.data(), raw.data(), 1, 28, 28, 224, 224);
  for (int c = 0; c < 3; ++c)
    for (int j = 0; j < 224 * 224; j += 997) {
      CAPTURE(j);
      CHECK(got[c * 224 * 224 + j] == doctest::Approx((want[j] - 0.5f) / 0.25f).epsilon(1e-5));
    }
  // Nothing to do gives the base itself; colour cannot become grey.
  CHECK(model_input_transforms({1, 28, 28}, 1, 28, 28, 0.f, 0.f).empty());
  CHECK(with_transforms(base, {}) == base);
  CHECK(contains(error_of([] { model_input_transforms({3, 8, 8}, 1, 8, 8, 0.f, 0.f); }),
                 "only grey (1-channel) images are replicated"));
}
