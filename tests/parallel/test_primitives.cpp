// replicate / scatter / gather / parallel_apply on their own, and a vanilla DataParallel
// written from them reproducing one replica's step on the same batch.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>

#include "kernels/ops.hpp"
#include "layers/layers.hpp"
#include "parallel/train/primitives.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"
#include "zoo/registry.hpp"

using namespace dpx;
using namespace dpx::parallel;

TEST_CASE("scatter makes torch.chunk-like zero-copy views; gather concatenates") {
  std::vector<float> v(7 * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from({7, 3}, v);
  auto parts = scatter(t, 3);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].size(0) == 3);
  CHECK(parts[1].size(0) == 2);
  CHECK(parts[2].size(0) == 2);
  CHECK(parts[1].raw() == static_cast<char*>(t.raw()) + 9 * sizeof(float));  // a view, no copy
  Tensor back = gather(parts);
  CHECK(back.to_vector() == v);
  CHECK_THROWS_WITH_AS(scatter(t, 8), doctest::Contains("cannot feed 8 replicas"), dpx::Error);
}

TEST_CASE("replicate makes independent copies; parallel_apply runs all and rethrows") {
  zoo::ModelOptions mo;
  mo.in_channels = 1;
  mo.image_size = 4;
  nn::Model m(zoo::build_model("mlp", mo));
  auto reps = replicate(m, 3);
  REQUIRE(reps.size() == 3);
  CHECK(reps[1].flat_params().to_vector() == m.flat_params().to_vector());
  Context ctx = Context::cpu();
  ops::fill(ctx, reps[1].flat_params(), 0.5f);
  CHECK(m.flat_params().to_vector()[0] != 0.5f);
  broadcast_weights(m, reps);
  CHECK(reps[1].flat_params().to_vector() == m.flat_params().to_vector());

  std::atomic<int> ran{0};
  parallel_apply(4, [&](int) { ++ran; });
  CHECK(ran == 4);
  CHECK_THROWS_WITH_AS(parallel_apply(3, [&](int i) { if (i == 2) fail("replica 2 failed"); }),
                       doctest::Contains("replica 2 failed"), dpx::Error);
}

TEST_CASE("a vanilla DataParallel step from the primitives equals one replica's step") {
  zoo::ModelOptions mo;
  mo.in_channels = 1;
  mo.image_size = 6;
  nn::Model single(zoo::build_model("mlp", mo));
  nn::Model master = single.clone(Device::cpu());
  Tensor x = testing::uniform({10, 1, 6, 6}, 3);
  Tensor labels = testing::labels_from({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  Context ctx = Context::cpu();
  nn::CrossEntropyLoss ce1, ce2;

  float l1 = ce1.forward(ctx, single.forward(ctx, x), labels);
  single.backward(ctx, ce1.backward(ctx));

  auto reps = replicate(master, 3);
  auto inputs = scatter(x, 3);
  std::vector<Tensor> outs(3);
  std::vector<Context> ctxs(3, Context::cpu());
  parallel_apply(3, [&](int i) { outs[i] = reps[i].forward(ctxs[i], inputs[i]); });
  float l2 = ce2.forward(ctx, gather(outs), labels);
  auto douts = scatter(ce2.backward(ctx), 3);
  parallel_apply(3, [&](int i) { reps[i].backward(ctxs[i], douts[i]); });
  reduce_gradients(ctx, master, reps);

  CHECK(l1 == doctest::Approx(l2).epsilon(1e-6));
  testing::check_close(master.flat_grads(), single.flat_grads(), 1e-5);
}
