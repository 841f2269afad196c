// GPU tests of batch normalisation (training and eval forward, running statistics, backward with
// accumulation and null gradients, on all of x or its first channels) and copy_channels (DenseNet's
// block buffer), of the softmax cross-entropy (label smoothing, backward scale) and
// count_correct, against the CPU ops on the same random inputs.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/cuda/cuda_ops.hpp"
#include "tests/cuda/gpu_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

TEST_CASE("cuda batch_norm training forward, eval forward and backward match the reference") {
  Context c = reference(), g = gpu();
  uint64_t seed = 1;
  // (3000, 70): rows, as a channels-last map is normalised (row_partial_sums_kernel: three tiles of
  // 32 channels, the last one partial).
  for (Shape xs : {Shape{3, 5, 13, 13}, Shape{7, 5}, Shape{2, 3, 4, 5, 6}, Shape{64, 3, 31, 31}, Shape{3000, 70}}) {
    CAPTURE(shape_str(xs));
    const int64_t C = xs[1];
    // An offset mean makes the variance computation meet some cancellation.
    Tensor x = uniform(xs, ++seed, 2.f, 5.f), gamma = uniform({C}, ++seed, 0.5f, 1.5f), beta = uniform({C}, ++seed);
    Tensor rm = uniform({C}, ++seed), rv = uniform({C}, ++seed, 0.5f, 2.f);
    Tensor gx = x.to(dev()), ggamma = gamma.to(dev()), gbeta = beta.to(dev());
    Tensor grm = rm.to(dev()), grv = rv.to(dev());
    Tensor y = Tensor::empty(xs), mean = Tensor::empty({C}), invstd = Tensor::empty({C});
    Tensor gy = poisoned(xs, dev()), gmean = poisoned({C}, dev()), ginvstd = poisoned({C}, dev());
    ops::batch_norm_forward_train(c, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::none);
    // batches_tracked counted by the statistics' kernel, once a call (41 -> 42).
    Tensor count = Tensor::zeros({1}, DType::i64);
    count.data<int64_t>()[0] = 41;
    Tensor gcount = count.to(dev());
    ops::batch_norm_forward_train(g, gy, gmean, ginvstd, grm, grv, gx, ggamma, gbeta, 0.1f, 1e-5f, &gcount,
                                  ops::Epilogue::none);
    CHECK(gcount.to(Device::cpu()).data<int64_t>()[0] == 42);
    check_close(gmean, mean, 1e-5);
    check_close(ginvstd, invstd, 1e-5);
    check_close(grm, rm, 1e-5);
    check_close(grv, rv, 1e-5);
    check_close(gy, y, 1e-5);

    Tensor ye = Tensor::empty(xs), gye = poisoned(xs, dev());
    ops::batch_norm_forward_eval(c, ye, x, gamma, beta, rm, rv, 1e-5f, ops::Epilogue::none);
    ops::batch_norm_forward_eval(g, gye, gx, ggamma, gbeta, grm, grv, 1e-5f, ops::Epilogue::none);
    check_close(gye, ye, 1e-5);

    Tensor dy = uniform(xs, ++seed), dx0 = uniform(xs, ++seed), dg0 = uniform({C}, ++seed), db0 = uniform({C}, ++seed);
    Tensor dx = dx0.clone(), dg = dg0.clone(), db = db0.clone();
    Tensor gdx = dx0.to(dev()), gdg = dg0.to(dev()), gdb = db0.to(dev()), gdy = dy.to(dev());
    ops::batch_norm_backward(c, &dx, &dg, &db, dy, x, gamma, mean, invstd, ops::DxMode::add, nullptr, nullptr);
    ops::batch_norm_backward(g, &gdx, &gdg, &gdb, gdy, gx, ggamma, gmean, ginvstd, ops::DxMode::add, nullptr, nullptr);
    // dx subtracts two per-channel means from dy: a long reduction, compared norm-wise.
    CHECK(norm_rel_diff(gdx, dx) <= 1e-5);
    CHECK(norm_rel_diff(gdg, dg) <= 1e-5);
    CHECK(norm_rel_diff(gdb, db) <= 1e-5);
    ops::batch_norm_backward(c, &dx, nullptr, nullptr, dy, x, gamma, mean, invstd, ops::DxMode::add, nullptr, nullptr);
    ops::batch_norm_backward(g, &gdx, nullptr, nullptr, gdy, gx, ggamma, gmean, ginvstd, ops::DxMode::add, nullptr, nullptr);
    CHECK(norm_rel_diff(gdx, dx) <= 1e-5);
    ops::batch_norm_backward(c, nullptr, &dg, nullptr, dy, x, gamma, mean, invstd, ops::DxMode::add, nullptr, nullptr);
    ops::batch_norm_backward(g, nullptr, &gdg, nullptr, gdy, gx, ggamma, gmean, ginvstd, ops::DxMode::add, nullptr, nullptr);
    CHECK(norm_rel_diff(gdg, dg) <= 1e-5);
    Tensor over = Tensor::zeros(xs), gover = poisoned(xs, dev());  // written over: NaN gone
    ops::batch_norm_backward(c, &over, nullptr, nullptr, dy, x, gamma, mean, invstd, ops::DxMode::overwrite, nullptr, nullptr);
    ops::batch_norm_backward(g, &gover, nullptr, nullptr, gdy, gx, ggamma, gmean, ginvstd, ops::DxMode::overwrite, nullptr, nullptr);
    CHECK(norm_rel_diff(gover, over) <= 1e-5);
  }
  Tensor one = Tensor::empty({1, 4}, DType::f32, dev()), four = Tensor::empty({4}, DType::f32, dev());
  CHECK_THROWS_WITH_AS(ops::batch_norm_forward_train(g, one, four, four, four, four, one, four, four, 0.1f, 1e-5f,
                                                     nullptr, ops::Epilogue::none),
                       doctest::Contains("more than 1 value per channel"), Error);
}

TEST_CASE("cuda cross_entropy forward and backward match the reference, with label smoothing") {
  Context c = reference(), g = gpu();
  struct Case { int64_t n, classes; float smoothing, scale; };
  uint64_t seed = 40;
  for (Case k : {Case{3, 1000, 0.f, 1.f}, Case{37, 10, 0.1f, 0.5f}, Case{129, 7, 0.3f, 2.f}, Case{1, 1, 0.f, 1.f}}) {
    CAPTURE(k.n);
    CAPTURE(k.classes);
    CAPTURE(k.smoothing);
    Tensor logits = uniform({k.n, k.classes}, ++seed, -6.f, 6.f), lab = random_labels(k.n, k.classes, ++seed);
    Tensor glogits = logits.to(dev()), glab = lab.to(dev());
    Tensor loss = Tensor::empty({1}), probs = Tensor::empty({k.n, k.classes});
    Tensor gloss = poisoned({1}, dev()), gprobs = poisoned({k.n, k.classes}, dev());
    ops::cross_entropy_forward(c, loss, probs, logits, lab, k.smoothing);
    ops::cross_entropy_forward(g, gloss, gprobs, glogits, glab, k.smoothing);
    check_close(gloss, loss, 1e-5);
    check_close(gprobs, probs, 1e-5);
    Tensor d0 = uniform({k.n, k.classes}, ++seed);
    Tensor d = d0.clone(), gd = d0.to(dev());
    ops::cross_entropy_backward(c, d, probs, lab, k.smoothing, k.scale);
    ops::cross_entropy_backward(g, gd, gprobs, glab, k.smoothing, k.scale);
    check_close(gd, d, 1e-5);
  }
}

TEST_CASE("cuda count_correct matches the reference, ties go to the first maximum") {
  Context c = reference(), g = gpu();
  for (int64_t classes : {10, 1000, 1}) {
    CAPTURE(classes);
    const int64_t n = 1037;
    Tensor logits = uniform({n, classes}, 60 + classes, -3.f, 3.f);
    // Coarse values: many rows hold their maximum twice.
    for (int64_t i = 0; i < logits.numel(); ++i)
      logits.data<float>()[i] = static_cast<float>(static_cast<int>(logits.data<float>()[i]));
    Tensor lab = random_labels(n, classes, 70 + classes);
    int64_t want = ops::count_correct(c, logits, lab);
    CHECK(ops::count_correct(g, logits.to(dev()), lab.to(dev())) == want);
  }
  Tensor tie = Tensor::from({2, 3}, {1, 5, 5, 2, 2, 0});
  Tensor lab = Tensor::empty({2}, DType::i64);
  lab.data<int64_t>()[0] = 1;  // first of the two 5s
  lab.data<int64_t>()[1] = 1;  // second of the two 2s: wrong
  CHECK(ops::count_correct(g, tie.to(dev()), lab.to(dev())) == 1);
}

TEST_CASE("cuda batch_norm Epilogue::relu equals relu_forward of the plain output") {
  Context g = gpu();
  const int64_t C = 6;
  Tensor x = uniform({4, C, 9, 9}, 41, -3.f, 3.f).to(dev());
  Tensor gamma = uniform({C}, 42).to(dev()), beta = uniform({C}, 43).to(dev());
  Tensor rm = uniform({C}, 44).to(dev()), rv = uniform({C}, 45, 0.5f, 2.f).to(dev());
  Tensor mean = poisoned({C}, dev()), invstd = poisoned({C}, dev());
  Tensor plain = poisoned(x.shape(), dev()), want = poisoned(x.shape(), dev());
  Tensor fused = poisoned(x.shape(), dev());
  ops::batch_norm_forward_train(g, plain, mean, invstd, rm, rv, x, gamma, beta, 0.f, 1e-5f, nullptr,
                                ops::Epilogue::none);
  ops::relu_forward(g, want, plain);
  ops::batch_norm_forward_train(g, fused, mean, invstd, rm, rv, x, gamma, beta, 0.f, 1e-5f, nullptr,
                                ops::Epilogue::relu);
  check_close(fused, want, 0);
  ops::batch_norm_forward_eval(g, plain, x, gamma, beta, rm, rv, 1e-5f, ops::Epilogue::none);
  ops::relu_forward(g, want, plain);
  ops::batch_norm_forward_eval(g, fused, x, gamma, beta, rm, rv, 1e-5f, ops::Epilogue::relu);
  check_close(fused, want, 0);
}

TEST_CASE("cuda batch_norm_backward with relu_out equals relu_backward then the plain backward") {
  Context g = gpu();
  const int64_t C = 6;
  const Shape xs{4, C, 9, 9};
  Tensor x = uniform(xs, 51, -3.f, 3.f).to(dev()), dy = uniform(xs, 52).to(dev());
  Tensor gamma = uniform({C}, 53).to(dev()), beta = uniform({C}, 54).to(dev());
  Tensor rm = uniform({C}, 55).to(dev()), rv = uniform({C}, 56, 0.5f, 2.f).to(dev());
  Tensor mean = poisoned({C}, dev()), invstd = poisoned({C}, dev()), y = poisoned(xs, dev());
  ops::batch_norm_forward_train(g, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr, ops::Epilogue::relu);
  Tensor masked = poisoned(xs, dev());
  ops::relu_backward(g, masked, dy, y, ops::DxMode::overwrite);
  Tensor dx_want = poisoned(xs, dev()), dx = poisoned(xs, dev());
  Tensor dg_want = Tensor::zeros({C}).to(dev()), dg = Tensor::zeros({C}).to(dev());
  Tensor db_want = Tensor::zeros({C}).to(dev()), db = Tensor::zeros({C}).to(dev());
  ops::batch_norm_backward(g, &dx_want, &dg_want, &db_want, masked, x, gamma, mean, invstd, ops::DxMode::overwrite,
                           nullptr, nullptr);
  ops::batch_norm_backward(g, &dx, &dg, &db, dy, x, gamma, mean, invstd, ops::DxMode::overwrite, &y, nullptr);
  check_close(dx, dx_want, 0);
  check_close(dg, dg_want, 0);
  check_close(db, db_want, 0);
}

// A SiLU folded in: Epilogue::silu writes silu(BN(x)) and batch_norm_backward with silu_beta
// recomputes BN(x) from x and the saved statistics, in the same order as the forward (bn_value):
// against silu_forward / silu_backward around the plain ops on the GPU (one formula, so to
// rounding at most), and against the reference on the host. Planes and rows (the row kernels:
// three tiles of 32 channels), each on all of x and on its first C channels (a wider x).
TEST_CASE("cuda batch_norm with a SiLU folded in (Epilogue::silu, silu_beta) equals the ops one after the other") {
  Context c = reference(), g = gpu();
  uint64_t seed = 80;
  struct Case {
    Shape x;
    int64_t c;
  };
  for (const Case& k : {Case{{4, 6, 9, 9}, 6}, Case{{3000, 70}, 70}, Case{{4, 9, 9, 9}, 6}, Case{{3000, 70}, 40}}) {
    CAPTURE(shape_str(k.x));
    CAPTURE(k.c);
    const Shape& xs = k.x;
    const int64_t C = k.c;
    Shape ys = xs;
    ys[1] = C;
    Tensor x = uniform(xs, ++seed, -3.f, 3.f), dy = uniform(ys, ++seed), gamma = uniform({C}, ++seed, 0.5f, 1.5f);
    Tensor beta = uniform({C}, ++seed), rm = Tensor::zeros({C}), rv = uniform({C}, ++seed, 0.5f, 2.f);
    Tensor gx = x.to(dev()), gdy = dy.to(dev()), ggamma = gamma.to(dev()), gbeta = beta.to(dev());
    Tensor grm = rm.to(dev()), grv = rv.to(dev()), grm2 = rm.to(dev()), grv2 = rv.to(dev());
    Tensor gmean = poisoned({C}, dev()), ginvstd = poisoned({C}, dev());
    Tensor plain = poisoned(ys, dev()), want = poisoned(ys, dev()), fused = poisoned(ys, dev());
    ops::batch_norm_forward_train(g, plain, gmean, ginvstd, grm, grv, gx, ggamma, gbeta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::none);
    ops::silu_forward(g, want, plain);
    ops::batch_norm_forward_train(g, fused, gmean, ginvstd, grm2, grv2, gx, ggamma, gbeta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::silu);
    check_close(fused, want, 1e-6);
    Tensor y = Tensor::empty(ys), mean = Tensor::empty({C}), invstd = Tensor::empty({C});
    ops::batch_norm_forward_train(c, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::silu);
    check_close(fused, y, 1e-5);
    Tensor eval_plain = poisoned(ys, dev()), eval_want = poisoned(ys, dev()), eval_fused = poisoned(ys, dev());
    ops::batch_norm_forward_eval(g, eval_plain, gx, ggamma, gbeta, grm, grv, 1e-5f, ops::Epilogue::none);
    ops::silu_forward(g, eval_want, eval_plain);
    ops::batch_norm_forward_eval(g, eval_fused, gx, ggamma, gbeta, grm, grv, 1e-5f, ops::Epilogue::silu);
    check_close(eval_fused, eval_want, 1e-6);

    // dx starts at zero everywhere, so that the channels past C (untouched) agree too.
    Tensor through = poisoned(ys, dev());
    ops::silu_backward(g, through, gdy, plain, ops::DxMode::overwrite);
    Tensor dx_want = Tensor::zeros(xs).to(dev()), dx = Tensor::zeros(xs).to(dev());
    Tensor dg_want = Tensor::zeros({C}).to(dev()), dg = Tensor::zeros({C}).to(dev());
    Tensor db_want = Tensor::zeros({C}).to(dev()), db = Tensor::zeros({C}).to(dev());
    ops::batch_norm_backward(g, &dx_want, &dg_want, &db_want, through, gx, ggamma, gmean, ginvstd,
                             ops::DxMode::overwrite, nullptr, nullptr);
    ops::batch_norm_backward(g, &dx, &dg, &db, gdy, gx, ggamma, gmean, ginvstd, ops::DxMode::overwrite, nullptr,
                             &gbeta);
    CHECK(scaled_error(dx, dx_want) <= 1e-6);
    CHECK(scaled_error(dg, dg_want) <= 1e-6);
    CHECK(scaled_error(db, db_want) <= 1e-6);
    Tensor rdx = Tensor::zeros(xs), rdg = Tensor::zeros({C}), rdb = Tensor::zeros({C});
    ops::batch_norm_backward(c, &rdx, &rdg, &rdb, dy, x, gamma, mean, invstd, ops::DxMode::overwrite, nullptr, &beta);
    CHECK(norm_rel_diff(dx, rdx) <= 1e-5);
    CHECK(norm_rel_diff(dg, rdg) <= 1e-5);
    CHECK(norm_rel_diff(db, rdb) <= 1e-5);
  }
}

// DenseNet's layers normalise the first C channels of their block's buffer in place: on the GPU as
// the reference does, the other channels (NaN here) neither read nor written.
TEST_CASE("cuda batch_norm on the first C channels of a wider x matches the reference") {
  Context c = reference(), g = gpu();
  const int64_t N = 3, C = 5, Cx = 9, H = 7, W = 6;
  Tensor x = uniform({N, Cx, H, W}, 71, 2.f, 5.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = C * H * W; i < Cx * H * W; ++i) x.data<float>()[n * Cx * H * W + i] = std::nanf("");
  Tensor gamma = uniform({C}, 72, 0.5f, 1.5f), beta = uniform({C}, 73), rm = uniform({C}, 74),
         rv = uniform({C}, 75, 0.5f, 2.f);
  Tensor gx = x.to(dev()), ggamma = gamma.to(dev()), gbeta = beta.to(dev()), grm = rm.to(dev()), grv = rv.to(dev());
  Tensor y = Tensor::empty({N, C, H, W}), mean = Tensor::empty({C}), invstd = Tensor::empty({C});
  Tensor gy = poisoned({N, C, H, W}, dev()), gmean = poisoned({C}, dev()), ginvstd = poisoned({C}, dev());
  ops::batch_norm_forward_train(c, y, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr, ops::Epilogue::relu);
  ops::batch_norm_forward_train(g, gy, gmean, ginvstd, grm, grv, gx, ggamma, gbeta, 0.1f, 1e-5f, nullptr,
                                ops::Epilogue::relu);
  check_close(gmean, mean, 1e-5);
  check_close(ginvstd, invstd, 1e-5);
  check_close(gy, y, 1e-5);
  Tensor ye = Tensor::empty({N, C, H, W}), gye = poisoned({N, C, H, W}, dev());
  ops::batch_norm_forward_eval(c, ye, x, gamma, beta, rm, rv, 1e-5f, ops::Epilogue::none);
  ops::batch_norm_forward_eval(g, gye, gx, ggamma, gbeta, grm, grv, 1e-5f, ops::Epilogue::none);
  check_close(gye, ye, 1e-5);
  Tensor dy = uniform({N, C, H, W}, 76), dx = uniform({N, Cx, H, W}, 77), dg = Tensor::zeros({C});
  Tensor gdx = dx.to(dev()), gdg = dg.to(dev());
  ops::batch_norm_backward(c, &dx, &dg, nullptr, dy, x, gamma, mean, invstd, ops::DxMode::add, &y, nullptr);
  ops::batch_norm_backward(g, &gdx, &gdg, nullptr, dy.to(dev()), gx, ggamma, gmean, ginvstd, ops::DxMode::add, &gy,
                           nullptr);
  CHECK(norm_rel_diff(gdx, dx) <= 1e-5);  // the channels past C: both untouched, so equal
  CHECK(norm_rel_diff(gdg, dg) <= 1e-5);
}

// The same under --precision bf16, as a DenseNet layer's first batch norm runs since the
// twenty-sixth session, in training and eval, on NCHW maps and on channels-last rows: its
// activated output in bf16 for conv1, and conv1's bf16 gradient read widened, its dx added into
// the wider fp32 gradient buffer. Each equals, bit for bit, the fp32 path (the output rounded; the
// gradient and the ReLU's output widened first). Written without a GPU at hand: run by scripts/gpu.
TEST_CASE("cuda batch_norm on the first C channels of a wider x with bf16 maps: the fp32 path's bits") {
  Context g = gpu();
  g.compute = DType::bf16;
  const int64_t N = 3, C = 5, Cx = 9, H = 7, W = 6;
  // NCHW maps, and channels-last ones as the batch norm sees them (rows (N*H*W, Cx), y (rows, C)).
  for (bool rows : {false, true}) {
    CAPTURE(rows);
    const Shape xs = rows ? Shape{N * H * W, Cx} : Shape{N, Cx, H, W};
    const Shape ys = rows ? Shape{N * H * W, C} : Shape{N, C, H, W};
    Tensor x = uniform(xs, 81, 2.f, 5.f);
    const int64_t outer = rows ? N * H * W : N, inner = rows ? 1 : H * W;
    for (int64_t n = 0; n < outer; ++n)  // the channels past C: never read
      for (int64_t i = C * inner; i < Cx * inner; ++i) x.data<float>()[n * Cx * inner + i] = std::nanf("");
    const Tensor gx = x.to(dev()), gamma = uniform({C}, 82, 0.5f, 1.5f).to(dev()), beta = uniform({C}, 83).to(dev());
    Tensor rm_a = Tensor::zeros({C}).to(dev()), rv_a = Tensor::zeros({C}).to(dev());
    Tensor rm_b = Tensor::zeros({C}).to(dev()), rv_b = Tensor::zeros({C}).to(dev());
    Tensor m_a = poisoned({C}, dev()), s_a = poisoned({C}, dev()), m_b = poisoned({C}, dev()),
           s_b = poisoned({C}, dev());
    Tensor yh = Tensor::empty(ys, DType::bf16, dev()), y32 = poisoned(ys, dev());
    ops::batch_norm_forward_train(g, yh, m_a, s_a, rm_a, rv_a, gx, gamma, beta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::relu);
    ops::batch_norm_forward_train(g, y32, m_b, s_b, rm_b, rv_b, gx, gamma, beta, 0.1f, 1e-5f, nullptr,
                                  ops::Epilogue::relu);
    CHECK(bitwise_equal(yh.to(Device::cpu()), y32.to(Device::cpu()).cast(DType::bf16)));
    CHECK(bitwise_equal(m_a.to(Device::cpu()), m_b.to(Device::cpu())));
    CHECK(bitwise_equal(rv_a.to(Device::cpu()), rv_b.to(Device::cpu())));
    // Eval (with the running statistics), into a half y as well.
    Tensor eh = Tensor::empty(ys, DType::bf16, dev()), e32 = poisoned(ys, dev());
    ops::batch_norm_forward_eval(g, eh, gx, gamma, beta, rm_a, rv_a, 1e-5f, ops::Epilogue::relu);
    ops::batch_norm_forward_eval(g, e32, gx, gamma, beta, rm_a, rv_a, 1e-5f, ops::Epilogue::relu);
    CHECK(bitwise_equal(eh.to(Device::cpu()), e32.to(Device::cpu()).cast(DType::bf16)));
    // conv1's gradient in bf16, and its widened copy; the ReLU's bf16 output, and its widened copy.
    Tensor dyh = Tensor::empty(ys, DType::bf16, dev()), dyw = poisoned(ys, dev());
    ops::cast(g, dyh, uniform(ys, 84).to(dev()), 1.f);
    ops::cast(g, dyw, dyh, 1.f);
    Tensor yw = poisoned(ys, dev());
    ops::cast(g, yw, yh, 1.f);
    const Tensor held = uniform(xs, 85).to(dev());
    Tensor dx_a = held.clone(), dx_b = held.clone();
    Tensor dg_a = Tensor::zeros({C}).to(dev()), db_a = Tensor::zeros({C}).to(dev());
    Tensor dg_b = Tensor::zeros({C}).to(dev()), db_b = Tensor::zeros({C}).to(dev());
    ops::batch_norm_backward(g, &dx_a, &dg_a, &db_a, dyh, gx, gamma, m_a, s_a, ops::DxMode::add, &yh, nullptr);
    ops::batch_norm_backward(g, &dx_b, &dg_b, &db_b, dyw, gx, gamma, m_b, s_b, ops::DxMode::add, &yw, nullptr);
    CHECK(bitwise_equal(dx_a.to(Device::cpu()), dx_b.to(Device::cpu())));  // the channels past C: held's
    CHECK(bitwise_equal(dg_a.to(Device::cpu()), dg_b.to(Device::cpu())));
    CHECK(bitwise_equal(db_a.to(Device::cpu()), db_b.to(Device::cpu())));
  }
}

// A batch norm with its SiLU folded in, under --precision bf16 (EfficientNet's expand convolution's,
// whose output the depthwise convolution reads since the twenty-sixth session): its output in bf16
// is the fp32 output rounded, and its backward from a bf16 dy (the depthwise convolution's dx as
// cuDNN gives it) equals the backward from its widened copy, bit for bit. Not run yet.
TEST_CASE("cuda batch_norm + SiLU with bf16 maps: a half output and a half dy give the fp32 path's bits") {
  Context g = gpu();
  g.compute = DType::bf16;
  const int64_t N = 4, C = 6, H = 9, W = 9;
  const Tensor x = uniform({N, C, H, W}, 91, -3.f, 3.f).to(dev()), gamma = uniform({C}, 92, 0.5f, 1.5f).to(dev());
  const Tensor beta = uniform({C}, 93).to(dev());
  Tensor rm = Tensor::zeros({C}).to(dev()), rv = Tensor::zeros({C}).to(dev());
  Tensor rm2 = Tensor::zeros({C}).to(dev()), rv2 = Tensor::zeros({C}).to(dev());
  Tensor mean = poisoned({C}, dev()), invstd = poisoned({C}, dev()), mean2 = poisoned({C}, dev()),
         invstd2 = poisoned({C}, dev());
  Tensor yh = Tensor::empty({N, C, H, W}, DType::bf16, dev()), y32 = poisoned({N, C, H, W}, dev());
  ops::batch_norm_forward_train(g, yh, mean, invstd, rm, rv, x, gamma, beta, 0.1f, 1e-5f, nullptr, ops::Epilogue::silu);
  ops::batch_norm_forward_train(g, y32, mean2, invstd2, rm2, rv2, x, gamma, beta, 0.1f, 1e-5f, nullptr,
                                ops::Epilogue::silu);
  CHECK(bitwise_equal(yh.to(Device::cpu()), y32.to(Device::cpu()).cast(DType::bf16)));
  Tensor dyh = Tensor::empty({N, C, H, W}, DType::bf16, dev()), dyw = poisoned({N, C, H, W}, dev());
  ops::cast(g, dyh, uniform({N, C, H, W}, 94).to(dev()), 1.f);
  ops::cast(g, dyw, dyh, 1.f);
  Tensor dx_a = poisoned({N, C, H, W}, dev()), dx_b = poisoned({N, C, H, W}, dev());
  Tensor dg_a = Tensor::zeros({C}).to(dev()), db_a = Tensor::zeros({C}).to(dev());
  Tensor dg_b = Tensor::zeros({C}).to(dev()), db_b = Tensor::zeros({C}).to(dev());
  ops::batch_norm_backward(g, &dx_a, &dg_a, &db_a, dyh, x, gamma, mean, invstd, ops::DxMode::overwrite, nullptr, &beta);
  ops::batch_norm_backward(g, &dx_b, &dg_b, &db_b, dyw, x, gamma, mean, invstd, ops::DxMode::overwrite, nullptr, &beta);
  CHECK(bitwise_equal(dx_a.to(Device::cpu()), dx_b.to(Device::cpu())));
  CHECK(bitwise_equal(dg_a.to(Device::cpu()), dg_b.to(Device::cpu())));
  CHECK(bitwise_equal(db_a.to(Device::cpu()), db_b.to(Device::cpu())));
}

// Runs of S = 12 floats (four at a time) and of S = 7 (one at a time), shorter than a block
// (strided over flat), and of S = 256 (float4s) and S = 135 (floats, four a thread, the last ones
// short) a block layer per image, written over and added.
TEST_CASE("cuda copy_channels matches the reference bit for bit") {
  Context c = reference(), g = gpu();
  for (Shape rest : {Shape{3, 4}, Shape{7, 1}, Shape{16, 16}, Shape{9, 15}}) {
    CAPTURE(shape_str(rest));
    Tensor src = uniform({3, 6, rest[0], rest[1]}, 78);
    for (ops::DxMode mode : {ops::DxMode::overwrite, ops::DxMode::add}) {
      Tensor dst = uniform({3, 9, rest[0], rest[1]}, 79), gdst = dst.to(dev());
      ops::copy_channels(c, dst, 5, src, 1, 4, mode);
      cuda::copy_channels(g, gdst, 5, src.to(dev()), 1, 4, mode);
      CHECK(bitwise_equal(gdst, dst));
    }
  }
}
