// GPU tests of the elementwise CUDA ops, ReLU, dropout and the SGD and AdamW steps against the
// CPU ops on the same random inputs (odd sizes); the dropout mask must equal the CPU's bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cuda/philox.cuh"
#include "tests/cuda/gpu_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

TEST_CASE("cuda philox equals core/rng's generator bit for bit") {
  for (uint64_t seed : {0ull, 1ull, 0x123456789abcdefull})
    for (uint64_t stream : {0ull, 7ull, ~0ull})
      for (uint64_t c = 0; c < 2000; c += 7) {
        Rng rng(seed, stream);
        CHECK(cuda::philox_bits(seed, stream, c) == rng.bits_at(c));
        CHECK(cuda::philox_uniform(seed, stream, c) == rng.uniform_at(c));
      }
}

TEST_CASE("cuda fill, copy, add, axpy, scale match the reference") {
  Context c = reference(), g = gpu();
  const int64_t n = 100003;
  Tensor a = uniform({n}, 1), b = uniform({n}, 2);
  Tensor ga = a.to(dev()), gb = b.to(dev());
  Tensor out = Tensor::empty({n}), gout = poisoned({n}, dev());

  ops::fill(c, out, 2.5f);
  ops::fill(g, gout, 2.5f);
  CHECK(bitwise_equal(gout, out));
  ops::add(c, out, a, b);
  ops::add(g, gout, ga, gb);
  CHECK(bitwise_equal(gout, out));
  ops::axpy(c, out, -0.37f, a);
  ops::axpy(g, gout, -0.37f, ga);
  check_close(gout, out, 1e-6);  // an fma may round once where the CPU rounds twice
  ops::scale(c, out, 1.3f);
  ops::scale(g, gout, 1.3f);
  check_close(gout, out, 1e-6);
  Tensor gcopy = poisoned({n}, dev());
  ops::copy(g, gcopy, gout);
  CHECK(bitwise_equal(gcopy, gout));
  // add_relu: the reference's bits (one add, then the ReLU); under --precision bf16 and fp16 with
  // out or b in that type, the fp32 op's on b widened, out rounded.
  Tensor s = uniform({n}, 5, -1.f, 1.f);
  float* sp = s.data<float>();
  sp[4] = std::numeric_limits<float>::infinity();  // (no NaN: the GPU's add makes its own NaN bits)
  sp[5] = -std::numeric_limits<float>::infinity();
  sp[6] = -0.f;
  sp[7] = -a.data<float>()[7];  // cancels to 0
  const Tensor gs = s.to(dev());
  ops::add_relu(c, out, a, s);
  ops::add_relu(g, gout, ga, gs);
  CHECK(bitwise_equal(gout, out));
  for (DType half : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(half));
    Context gh = gpu();
    gh.compute = half;
    const Tensor sh = s.cast(half), sw = sh.cast(DType::f32);
    Tensor out_h = Tensor::empty({n}, half, dev()), out_w = poisoned({n}, dev());
    ops::add_relu(gh, out_h, ga, sh.to(dev()));
    ops::add_relu(g, out_w, ga, sw.to(dev()));
    CHECK(bitwise_equal(out_h.to(Device::cpu()), out_w.to(Device::cpu()).cast(half)));
    Tensor out_f = poisoned({n}, dev());  // fp32 out from a half b
    ops::add_relu(gh, out_f, ga, sh.to(dev()));
    CHECK(bitwise_equal(out_f.to(Device::cpu()), out_w.to(Device::cpu())));
    Tensor out_hf = Tensor::empty({n}, half, dev());  // a half out from an fp32 b (a stage's first block)
    ops::add_relu(gh, out_hf, ga, gs);
    CHECK(bitwise_equal(out_hf.to(Device::cpu()), out.cast(half)));
  }

  Tensor lab = random_labels(37, 1000, 3), glab = lab.to(dev()), gl2 = Tensor::empty({37}, DType::i64, dev());
  ops::copy(g, gl2, glab);  // any dtype is a byte copy
  CHECK(bitwise_equal(gl2, lab));
  Tensor wrong = Tensor::empty({37}, DType::f32, dev());
  CHECK_THROWS_AS(ops::copy(g, wrong, glab), Error);
  Tensor overlap = uniform({10}, 4).to(dev());
  Tensor first = overlap.view_at(0, {6}), last = overlap.view_at(4, {6});
  Tensor want = overlap.to(Device::cpu()).view_at(4, {6}).clone();
  ops::copy(g, first, last);  // overlapping views: copied as if through a temporary
  CHECK(bitwise_equal(first, want));
}

// Elementwise ops move four values a thread where every pointer is 16-byte aligned (the tensors
// above) and one where one is not: views that start one element in take the second path.
TEST_CASE("cuda elementwise ops on views one element in (not 16-byte aligned) match the reference") {
  Context c = reference(), g = gpu();
  const int64_t n = 4097;
  Tensor base = uniform({n + 1}, 11), dbase = uniform({n + 1}, 12);
  Tensor gbase = base.to(dev()), gdbase = dbase.to(dev());
  const Tensor x = base.view_at(1, {n}), gx = gbase.view_at(1, {n});
  const Tensor d = dbase.view_at(1, {n}), gd = gdbase.view_at(1, {n});
  Tensor y = Tensor::empty({n}), gstore = poisoned({n + 1}, dev());
  Tensor gy = gstore.view_at(1, {n});
  ops::relu_forward(c, y, x);
  ops::relu_forward(g, gy, gx);
  CHECK(bitwise_equal(gy, y));
  ops::relu_backward(c, y, d, x, ops::DxMode::add);
  ops::relu_backward(g, gy, gd, gx, ops::DxMode::add);
  CHECK(bitwise_equal(gy, y));
  ops::axpy(c, y, -0.37f, x);
  ops::axpy(g, gy, -0.37f, gx);
  check_close(gy, y, 1e-6);
  ops::silu_forward(c, y, x);
  ops::silu_forward(g, gy, gx);
  check_close(gy, y, 1e-5);
  ops::silu_backward(c, y, d, x, ops::DxMode::add);
  ops::silu_backward(g, gy, gd, gx, ops::DxMode::add);
  check_close(gy, y, 1e-5);
  ops::fill(c, y, -1.5f);
  ops::fill(g, gy, -1.5f);
  CHECK(bitwise_equal(gy, y));
  CHECK(std::isnan(gstore.to(Device::cpu()).data<float>()[0]));  // nothing before the view was written
}

TEST_CASE("cuda count_nonfinite counts as the reference does") {
  Context c = reference(), g = gpu();
  Tensor x = uniform({100003}, 5);
  x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[77777] = -std::numeric_limits<float>::infinity();
  Tensor gx = x.to(dev());
  CHECK(ops::count_nonfinite(g, gx) == 2);
  CHECK(ops::count_nonfinite(g, gx) == ops::count_nonfinite(c, x));
  CHECK(ops::count_nonfinite(g, gx.view_at(1, {1000})) == 0);
  Tensor count = Tensor::zeros({1}, DType::i64);
  count.data<int64_t>()[0] = 9;  // overwritten on the device, not added to
  Tensor gcount = count.to(dev());
  ops::count_nonfinite_into(g, gcount, gx);
  CHECK(gcount.to(Device::cpu()).data<int64_t>()[0] == 2);
  ops::count_nonfinite_into(g, gcount, gx.view_at(1, {1000}));
  CHECK(gcount.to(Device::cpu()).data<int64_t>()[0] == 0);
}

TEST_CASE("cuda increment_i64 adds one on the device") {
  Context g = gpu();
  Tensor counter = Tensor::zeros({}, DType::i64);
  counter.data<int64_t>()[0] = (int64_t(1) << 40) - 1;
  Tensor gc = counter.to(dev());
  ops::increment_i64(g, gc);
  ops::increment_i64(g, gc);
  CHECK(gc.to(Device::cpu()).data<int64_t>()[0] == (int64_t(1) << 40) + 1);
}

TEST_CASE("cuda poison_if_nonfinite reads the value on the device: NaN everywhere after inf, unchanged after a finite value") {
  Context g = gpu();
  Tensor x = uniform({3, 70001}, 8);
  Tensor value = Tensor::empty({1});
  for (float v : {1.5f, std::numeric_limits<float>::infinity()}) {
    CAPTURE(v);
    value.data<float>()[0] = v;
    Tensor gx = x.to(dev()), gv = value.to(dev());
    ops::poison_if_nonfinite(g, gx, gv);
    const Tensor back = gx.to(Device::cpu());
    if (std::isfinite(v)) CHECK(back.to_vector() == x.to_vector());
    else CHECK(ops::count_nonfinite(g, gx) == x.numel());
  }
}

TEST_CASE("cuda relu forward and backward (accumulating, and written over) match the reference") {
  Context c = reference(), g = gpu();
  Tensor x = uniform({3, 5, 13, 13}, 5), dy = uniform(x.shape(), 6), dx0 = uniform(x.shape(), 7);
  Tensor y = Tensor::empty(x.shape()), gy = poisoned(x.shape(), dev());
  ops::relu_forward(c, y, x);
  ops::relu_forward(g, gy, x.to(dev()));
  CHECK(bitwise_equal(gy, y));
  Tensor dx = dx0.clone(), gdx = dx0.to(dev());
  ops::relu_backward(c, dx, dy, y, ops::DxMode::add);
  ops::relu_backward(g, gdx, dy.to(dev()), gy, ops::DxMode::add);
  CHECK(bitwise_equal(gdx, dx));
  Tensor gover = poisoned(x.shape(), dev());
  ops::relu_backward(c, dx, dy, y, ops::DxMode::overwrite);
  ops::relu_backward(g, gover, dy.to(dev()), gy, ops::DxMode::overwrite);
  CHECK(bitwise_equal(gover, dx));
}

TEST_CASE("cuda dropout: the mask equals the reference's bit for bit, values and gradients match") {
  Context c = reference(), g = gpu();
  const Shape shape{7, 4099};
  Tensor x = uniform(shape, 8), dy = uniform(shape, 9), dx0 = uniform(shape, 10);
  for (float p : {0.f, 0.1f, 0.5f, 0.9f, 1.f}) {
    CAPTURE(p);
    Tensor y = Tensor::empty(shape), mask = Tensor::empty(shape, DType::u8);
    Tensor gy = poisoned(shape, dev()), gmask = Tensor::empty(shape, DType::u8, dev());
    ops::dropout_forward(c, y, mask, x, p, 1234, 77);
    ops::dropout_forward(g, gy, gmask, x.to(dev()), p, 1234, 77);
    CHECK(bitwise_equal(gmask, mask));
    check_close(gy, y, 1e-6);
    Tensor dx = dx0.clone(), gdx = dx0.to(dev());
    ops::dropout_backward(c, dx, dy, mask, p);
    ops::dropout_backward(g, gdx, dy.to(dev()), gmask, p);
    check_close(gdx, dx, 1e-6);
  }
  Tensor mask_a = Tensor::empty(shape, DType::u8, dev()), mask_b = Tensor::empty(shape, DType::u8, dev());
  Tensor gy = Tensor::empty(shape, DType::f32, dev()), gx = x.to(dev());
  ops::dropout_forward(g, gy, mask_a, gx, 0.5f, 1234, 77);
  ops::dropout_forward(g, gy, mask_b, gx, 0.5f, 1234, 78);
  CHECK_FALSE(bitwise_equal(mask_a, mask_b));  // another stream draws another mask
}

TEST_CASE("cuda bernoulli_scale and the random offset draw the reference's numbers") {
  Context c = reference(), g = gpu();
  Tensor offset = Tensor::zeros({1}, DType::i64);
  offset.data<int64_t>()[0] = 3;
  Tensor goffset = offset.to(dev());
  for (float keep : {0.f, 0.5f, 0.9f, 1.f}) {
    CAPTURE(keep);
    Tensor noise = Tensor::empty({3001}), gnoise = poisoned({3001}, dev());
    ops::bernoulli_scale(c, noise, keep, 99, 20);
    g.random_offset = &goffset;  // 17 + 3
    ops::bernoulli_scale(g, gnoise, keep, 99, 17);
    g.random_offset = nullptr;
    CHECK(bitwise_equal(gnoise, noise));
  }
  const Shape shape{5, 777};
  Tensor x = uniform(shape, 11), y = Tensor::empty(shape), mask = Tensor::empty(shape, DType::u8);
  Tensor gy = poisoned(shape, dev()), gmask = Tensor::empty(shape, DType::u8, dev());
  ops::dropout_forward(c, y, mask, x, 0.4f, 5, 43);
  g.random_offset = &goffset;  // 40 + 3
  ops::dropout_forward(g, gy, gmask, x.to(dev()), 0.4f, 5, 40);
  CHECK(bitwise_equal(gmask, mask));
}

TEST_CASE("cuda sgd_step matches the reference for every option over several steps") {
  struct Case { float momentum, dampening, wd; bool nesterov; };
  for (Case k : {Case{0.f, 0.f, 0.f, false}, Case{0.9f, 0.f, 0.f, false}, Case{0.9f, 0.1f, 1e-4f, false},
                 Case{0.9f, 0.f, 5e-4f, true}, Case{0.f, 0.f, 1e-2f, false}}) {
    CAPTURE(k.momentum);
    CAPTURE(k.nesterov);
    ops::SgdParams p;
    p.lr = 0.05f;
    p.momentum = k.momentum;
    p.dampening = k.dampening;
    p.weight_decay = k.wd;
    p.nesterov = k.nesterov;
    Context c = reference(), g = gpu();
    const Shape shape{10007};
    Tensor w = uniform(shape, 11), buf = Tensor::zeros(shape);
    Tensor gw = w.to(dev()), gbuf = buf.to(dev());
    for (int step = 0; step < 3; ++step) {
      Tensor grad = uniform(shape, 20 + step);
      ops::sgd_step(c, w, grad, buf, p, step == 0, nullptr, nullptr);
      ops::sgd_step(g, gw, grad.to(dev()), gbuf, p, step == 0, nullptr, nullptr);
    }
    // Three steps of a few fused multiply-adds each: a few ulps apart at most.
    check_close(gw, w, 1e-5);
    if (k.momentum != 0.f) check_close(gbuf, buf, 1e-5);
  }
  ops::SgdParams bad;
  bad.nesterov = true;  // no momentum: torch.optim.SGD refuses it, and so do both ops
  Context g = gpu();
  Tensor w = Tensor::zeros({4}, DType::f32, dev()), b = Tensor::zeros({4}, DType::f32, dev());
  CHECK_THROWS_AS(ops::sgd_step(g, w, w, b, bad, true, nullptr, nullptr), Error);
}

TEST_CASE("cuda adamw_step matches the reference over several steps, with and without weight decay") {
  for (ops::AdamwParams p : {ops::AdamwParams{},
                             ops::AdamwParams{.lr = 0.1f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-3f,
                                              .weight_decay = 0.5f},
                             ops::AdamwParams{.lr = 0.01f, .beta1 = 0.f, .beta2 = 0.5f, .eps = 0.f,
                                              .weight_decay = 0.f}}) {
    CAPTURE(p.lr);
    Context c = reference(), g = gpu();
    const Shape shape{10007};
    Tensor w = uniform(shape, 31), m = Tensor::zeros(shape), v = Tensor::zeros(shape);
    Tensor gw = w.to(dev()), gm = m.to(dev()), gv = v.to(dev());
    for (int64_t step = 1; step <= 4; ++step) {
      Tensor grad = uniform(shape, 40 + step);
      ops::adamw_step(c, w, grad, m, v, p, step, nullptr, nullptr);
      ops::adamw_step(g, gw, grad.to(dev()), gm, gv, p, step, nullptr, nullptr);
    }
    // The same f32 scalars (ops::adamw_scalars) on both; an fma or a sqrt may round differently.
    check_close(gw, w, 1e-5);
    check_close(gm, m, 1e-5);
    check_close(gv, v, 1e-5);
  }
  Context g = gpu();
  Tensor w = Tensor::zeros({4}, DType::f32, dev()), m = Tensor::zeros({4}, DType::f32, dev());
  CHECK_THROWS_AS(ops::adamw_step(g, w, w, m, m, {.beta1 = 1.f}, 1, nullptr, nullptr), Error);  // torch refuses beta 1
  CHECK_THROWS_AS(ops::adamw_step(g, w, w, m, m, {}, 0, nullptr, nullptr), Error);              // steps count from 1
}

// A recorded update (--cuda-graph) reads its scalars on the device and skips itself where the
// guard's count is not zero (ops.def): the same results as the eager kernels, bit for bit, since
// the values and the arithmetic are the same; nothing written when skipped.
TEST_CASE("cuda sgd_step and adamw_step with their scalars and skip count on the device") {
  Context g = gpu();
  const Shape shape{10007};
  const Tensor w0 = uniform(shape, 51), grad = uniform(shape, 52).to(dev());
  Tensor skip = Tensor::zeros({1}, DType::i64), go = Tensor::zeros({1}, DType::i64, dev());
  skip.data<int64_t>()[0] = 1;
  skip = skip.to(dev());
  auto same = [](const Tensor& a, const Tensor& b) { return a.to_vector() == b.to_vector(); };
  {
    ops::SgdParams p{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true};
    Tensor a = w0.to(dev()), b = w0.to(dev()), ma = Tensor::zeros(shape, DType::f32, dev()), mb = ma.clone();
    const Tensor lr = Tensor::from({1}, {0.05f}).to(dev());
    ops::SgdParams stale = p;
    stale.lr = 7.f;
    for (int step = 0; step < 3; ++step) {
      ops::sgd_step(g, a, grad, ma, p, step == 0, nullptr, nullptr);
      ops::sgd_step(g, b, grad, mb, stale, step == 0, &lr, &go);
    }
    CHECK(same(a, b));
    CHECK(same(ma, mb));
    ops::sgd_step(g, b, grad, mb, p, false, &lr, &skip);
    CHECK(same(a, b));
    CHECK(same(ma, mb));
  }
  {
    const ops::AdamwParams p{.weight_decay = 0.05f};
    Tensor a = w0.to(dev()), b = w0.to(dev());
    Tensor ma = Tensor::zeros(shape, DType::f32, dev()), va = ma.clone(), mb = ma.clone(), vb = ma.clone();
    Tensor scalars = Tensor::empty({ops::kAdamwScalars});
    for (int64_t step = 1; step <= 3; ++step) {
      const ops::AdamwScalars s = ops::adamw_scalars(p, step);
      std::memcpy(scalars.data<float>(), &s, sizeof s);
      const Tensor on_device = scalars.to(dev());
      ops::adamw_step(g, a, grad, ma, va, p, step, nullptr, nullptr);
      ops::adamw_step(g, b, grad, mb, vb, ops::AdamwParams{}, 1, &on_device, &go);
    }
    CHECK(same(a, b));
    CHECK(same(ma, mb));
    CHECK(same(va, vb));
    const Tensor on_device = scalars.to(dev());
    ops::adamw_step(g, b, grad, mb, vb, p, 4, &on_device, &skip);
    CHECK(same(a, b));
    CHECK(same(va, vb));
  }
}
