// Tests of the CPU cross-entropy (with and without label smoothing) against hand values,
// its gradient, numerical stability, label checks, and count_correct.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::check_close;
using dpx::testing::labels_from;
using dpx::testing::randn;

// logits [[1, 2, 3], [1, 1, 1]], labels [2, 0]:
//   row 0: lse = 3 + log(1 + e^-1 + e^-2) = 3.4076059645; -log p_2 = 0.4076059645
//   row 1: lse = 1 + log 3;                               -log p_0 = log 3 = 1.0986122887
//   mean = 0.7531091266
//   smoothing 0.1: row 0 = 0.9 * 0.4076059645 + 0.1 * (lse - mean(z) = 1.4076059645)
//                        = 0.5076059645; row 1 = log 3 (all classes alike); mean = 0.8031091266
TEST_CASE("cross_entropy: hand values with and without label smoothing") {
  Context ctx = Context::cpu();
  Tensor logits = Tensor::from({2, 3}, {1, 2, 3, 1, 1, 1});
  Tensor labels = labels_from({2, 0});
  Tensor loss = Tensor::empty({1}), probs = Tensor::empty({2, 3});
  ops::cross_entropy_forward(ctx, loss, probs, logits, labels, 0.f);
  CHECK(loss.item() == doctest::Approx(0.7531091266).epsilon(1e-6));
  check_close(probs, {0.0900305732, 0.2447284711, 0.6652409558, 1 / 3., 1 / 3., 1 / 3.}, 1e-6);

  // d/dz = (p - onehot) / N
  Tensor d = Tensor::zeros({2, 3});
  ops::cross_entropy_backward(ctx, d, probs, labels, 0.f, 1.f);
  check_close(d, {0.0450152866, 0.1223642355, -0.1673795221, -1 / 3., 1 / 6., 1 / 6.}, 1e-6);
  // Accumulates, and scale multiplies.
  ops::cross_entropy_backward(ctx, d, probs, labels, 0.f, 2.f);
  check_close(d, {3 * 0.0450152866, 3 * 0.1223642355, -3 * 0.1673795221, -1., 0.5, 0.5}, 1e-6);

  ops::cross_entropy_forward(ctx, loss, probs, logits, labels, 0.1f);
  CHECK(loss.item() == doctest::Approx(0.8031091266).epsilon(1e-6));
  // d/dz = (p - 0.9 onehot - 0.1 / 3) / N
  Tensor ds = Tensor::zeros({2, 3});
  ops::cross_entropy_backward(ctx, ds, probs, labels, 0.1f, 1.f);
  check_close(ds, {0.0283486199, 0.1056975689, -0.1340461888, -0.3, 0.15, 0.15}, 1e-6);
}

TEST_CASE("cross_entropy: gradient matches centred differences of the loss") {
  Context ctx = Context::cpu();
  const int64_t N = 4, C = 5;
  Tensor logits = randn({N, C}, 11, 2.f);
  Tensor labels = labels_from({0, 4, 2, 2});
  Tensor loss = Tensor::empty({1}), probs = Tensor::empty({N, C});
  ops::cross_entropy_forward(ctx, loss, probs, logits, labels, 0.2f);
  Tensor grad = Tensor::zeros({N, C});
  ops::cross_entropy_backward(ctx, grad, probs, labels, 0.2f, 1.f);
  std::vector<double> numeric(N * C);
  float* z = logits.data<float>();
  for (int64_t i = 0; i < N * C; ++i) {
    const float keep = z[i], h = 1e-2f;
    z[i] = keep + h;
    ops::cross_entropy_forward(ctx, loss, probs, logits, labels, 0.2f);
    const double up = loss.item();
    z[i] = keep - h;
    ops::cross_entropy_forward(ctx, loss, probs, logits, labels, 0.2f);
    numeric[i] = (up - loss.item()) / (2.0 * h);
    z[i] = keep;
  }
  check_close(grad, numeric, 2e-3);
}

TEST_CASE("cross_entropy: large logits stay finite (log-sum-exp)") {
  Context ctx = Context::cpu();
  Tensor logits = Tensor::from({2, 2}, {1000, 0, -1000, 1000});
  Tensor loss = Tensor::empty({1}), probs = Tensor::empty({2, 2});
  ops::cross_entropy_forward(ctx, loss, probs, logits, labels_from({0, 0}), 0.f);
  // Row 0 is certain and right (loss 0); row 1 is certain and wrong (loss 2000).
  CHECK(loss.item() == doctest::Approx(1000.0));
  check_close(probs, {1, 0, 0, 1});
}

TEST_CASE("cross_entropy: out-of-range labels name the label and the number of classes") {
  Context ctx = Context::cpu();
  Tensor logits = Tensor::zeros({2, 10}), loss = Tensor::empty({1}), probs = Tensor::empty({2, 10});
  CHECK_THROWS_WITH_AS(
      ops::cross_entropy_forward(ctx, loss, probs, logits, labels_from({3, 10}), 0.f),
      doctest::Contains("label 10 (row 1) is out of range for 10 classes"), Error);
  CHECK_THROWS_WITH_AS(
      ops::cross_entropy_forward(ctx, loss, probs, logits, labels_from({-1, 0}), 0.f),
      doctest::Contains("label -1 (row 0)"), Error);
  Tensor dl = Tensor::zeros({2, 10});
  CHECK_THROWS_WITH_AS(ops::cross_entropy_backward(ctx, dl, probs, labels_from({0, 12}), 0.f, 1.f),
                       doctest::Contains("label 12"), Error);
  Tensor float_labels = Tensor::zeros({2});
  CHECK_THROWS_WITH_AS(ops::cross_entropy_forward(ctx, loss, probs, logits, float_labels, 0.f),
                       doctest::Contains("labels (2) must be i64, got f32"), Error);
}

TEST_CASE("count_correct: arg-max against labels, first maximum wins ties") {
  Context ctx = Context::cpu();
  Tensor logits = Tensor::from({4, 3}, {0, 5, 1, 2, 2, 1, 3, 1, 3, -1, -2, -0.5f});
  CHECK(ops::count_correct(ctx, logits, labels_from({1, 0, 0, 2})) == 4);
  CHECK(ops::count_correct(ctx, logits, labels_from({1, 1, 2, 0})) == 1);
}
