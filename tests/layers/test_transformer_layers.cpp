// The parameter-light layers the Swin and EfficientNet families add: LayerNorm, GELU, SiLU,
// Sigmoid, Permute and StochasticDepth. Gradient checks for each; initial values, torch's
// descriptions, stochastic depth's draws, and errors naming the layer and shapes.
#include <doctest/doctest.h>

#include "layers/activation.hpp"
#include "layers/layer_norm.hpp"
#include "layers/permute.hpp"
#include "layers/stochastic_depth.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

TEST_CASE("LayerNorm: gradients of input, weight and bias; torch's init and description") {
  Context ctx = Context::cpu();
  nn::LayerNorm ln(5);
  CHECK(ln.weight().value.to_vector() == std::vector<float>(5, 1.f));
  CHECK(ln.bias().value.to_vector() == std::vector<float>(5, 0.f));
  CHECK(ln.describe() == "LayerNorm((5,), eps=1e-05, elementwise_affine=True)");
  ln.weight().value.copy_from(uniform({5}, 1, 0.5f, 1.5f));
  ln.bias().value.copy_from(uniform({5}, 2));
  CHECK_GRADIENTS(ctx, ln, uniform({2, 3, 5}, 3, -2.f, 2.f));
  // Each row of the output has mean beta-weighted 0 and unit variance before the affine map.
  nn::LayerNorm plain(4, 1e-6f);
  auto y = plain.forward(ctx, Tensor::from({1, 4}, {1, 2, 3, 4})).to_vector();
  CHECK(y[0] == doctest::Approx(-1.3416407).epsilon(1e-5));
  CHECK(y[3] == doctest::Approx(1.3416407).epsilon(1e-5));
  CHECK_THROWS_WITH_AS(
      plain.forward(ctx, Tensor::zeros({2, 5})),
      doctest::Contains("LayerNorm((4,), eps=1e-06, elementwise_affine=True) given input (2, 5)"), Error);
}

TEST_CASE("GELU, SiLU, Sigmoid: gradients and torch's descriptions") {
  Context ctx = Context::cpu();
  Tensor x = uniform({2, 3, 4}, 4, -3.f, 3.f);
  nn::GELU gelu;
  nn::SiLU silu;
  nn::Sigmoid sigmoid;
  CHECK_GRADIENTS(ctx, gelu, x);
  CHECK_GRADIENTS(ctx, silu, x);
  CHECK_GRADIENTS(ctx, sigmoid, x);
  CHECK(gelu.describe() == "GELU(approximate='none')");
  CHECK(silu.describe() == "SiLU()");
  CHECK(sigmoid.describe() == "Sigmoid()");
  CHECK(gelu.forward(ctx, Tensor::from({1}, {1.f})).item() == doctest::Approx(0.8413447).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(silu.backward(ctx, Tensor::zeros({3})), doctest::Contains("SiLU(): backward"), Error);
}

TEST_CASE("Permute: gradient, shape, and the inverse permutation in backward") {
  Context ctx = Context::cpu();
  nn::Permute to_last({0, 2, 3, 1});
  CHECK(to_last.describe() == "Permute(dims=[0, 2, 3, 1])");
  Tensor x = uniform({2, 3, 2, 4}, 5);
  Tensor y = to_last.forward(ctx, x);
  CHECK(y.shape() == Shape{2, 2, 4, 3});
  CHECK(y.to_vector()[1] == x.to_vector()[8]);  // y[0, 0, 0, 1] = x[0, 1, 0, 0]
  CHECK_GRADIENTS(ctx, to_last, x);
  CHECK_THROWS_WITH_AS(nn::Permute({0, 2, 2}), doctest::Contains("must be a permutation"), Error);
  CHECK_THROWS_WITH_AS(
      to_last.forward(ctx, Tensor::zeros({2, 3})),
      doctest::Contains("Permute(dims=[0, 2, 3, 1]) given input (2, 3): expected 4 dimensions"), Error);
}

TEST_CASE("StochasticDepth: rows dropped or scaled by 1/(1-p); gradient; identity in eval") {
  Context ctx = Context::cpu();
  Rng rng(11);
  nn::StochasticDepth sd(0.5f, "row", rng);
  CHECK(sd.describe() == "StochasticDepth(p=0.5, mode=row)");
  Tensor x = uniform({8, 2, 3}, 6, 0.5f, 1.f);
  auto xv = x.to_vector(), yv = sd.forward(ctx, x).to_vector();
  int dropped = 0;
  for (int n = 0; n < 8; ++n) {
    const bool zero = yv[n * 6] == 0.f;
    dropped += zero;
    for (int i = 0; i < 6; ++i) CHECK(yv[n * 6 + i] == (zero ? 0.f : 2.f * xv[n * 6 + i]));
  }
  CHECK(dropped > 0);  // seed 11 drops some rows and keeps others
  CHECK(dropped < 8);
  CHECK_GRADIENTS(ctx, sd, x);
  // Each application draws anew; over many, rows survive with probability 1 - p.
  int kept = 0, total = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor noise;
    sd.apply(ctx, x, noise);
    for (float v : noise.to_vector()) kept += v != 0.f, ++total;
  }
  CHECK(double(kept) / total == doctest::Approx(0.5).epsilon(0.1));
  sd.eval();
  Tensor same = sd.forward(ctx, x);
  CHECK(same.storage() == x.storage());  // torchvision returns the input itself
  CHECK(sd.backward(ctx, x).to_vector() == xv);
}

TEST_CASE("StochasticDepth: batch mode drops everything or nothing; p = 0 and p = 1; errors") {
  Context ctx = Context::cpu();
  Rng rng(3);
  nn::StochasticDepth batch(0.3f, "batch", rng);
  Tensor x = uniform({4, 5}, 7, 0.5f, 1.f);
  for (int step = 0; step < 10; ++step) {
    auto y = batch.forward(ctx, x).to_vector();
    const bool zero = y[0] == 0.f;
    for (size_t i = 0; i < y.size(); ++i) CHECK((y[i] == 0.f) == zero);
  }
  CHECK_GRADIENTS(ctx, batch, x);
  nn::StochasticDepth never(0.f, "row", rng), always(1.f, "row", rng);
  CHECK(never.forward(ctx, x).storage() == x.storage());
  CHECK(always.forward(ctx, x).to_vector() == std::vector<float>(20, 0.f));
  CHECK_THROWS_WITH_AS(nn::StochasticDepth(0.2f, "column", rng),
                       doctest::Contains("mode must be \"row\" or \"batch\""), Error);
  CHECK_THROWS_WITH_AS(nn::StochasticDepth(1.5f, "row", rng), doctest::Contains("p must be a probability"),
                       Error);
}
