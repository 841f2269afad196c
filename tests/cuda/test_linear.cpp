// GPU tests of the cuBLAS matrix products against the CPU ops and a float64 reference: linear
// forward/backward (accumulating, null gradients) and batched matmul with every transpose.
// Norm-wise errors (see gpu_test_util.hpp); a 1e-5 bound also proves that no TF32 was used.
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "kernels/ref/ref_ops.hpp"
#include "tests/cuda/gpu_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

// y = x W^T + b by the reference kernel (kernels/ref/linear.cpp: dot products in double).
Tensor linear_reference(const Tensor& x, const Tensor& w, const Tensor* b) {
  Context ctx = Context::cpu();
  Tensor y = Tensor::empty({x.size(0), w.size(0)});
  ref::linear_forward(ctx, y, x, w, b);
  return y;
}

}  // namespace

TEST_CASE("cuda linear_forward matches float64 and the reference, with and without bias, no TF32") {
  Context c = reference(), g = gpu();
  // The second shape: rows enough that the bias's broadcast gives each thread several rows.
  using Shape3 = std::array<int64_t, 3>;  // rows, inputs, outputs
  for (const Shape3& shape : {Shape3{7, 1031, 33}, Shape3{600, 64, 70}}) {
    const int64_t rows = shape[0], inputs = shape[1], outputs = shape[2];
    CAPTURE(rows);
    Tensor xs = uniform({rows, inputs}, 1), ws = uniform({outputs, inputs}, 2), bs = uniform({outputs}, 3);
    for (bool with_bias : {true, false}) {
      CAPTURE(with_bias);
      const Tensor* bp = with_bias ? &bs : nullptr;
      Tensor gb = bs.to(dev());
      Tensor y = Tensor::empty({rows, outputs}), gy = poisoned({rows, outputs}, dev());
      ops::linear_forward(c, y, xs, ws, bp);
      ops::linear_forward(g, gy, xs.to(dev()), ws.to(dev()), with_bias ? &gb : nullptr);
      CHECK(norm_rel_diff(gy, linear_reference(xs, ws, bp)) <= 1e-5);
      CHECK(norm_rel_diff(gy, y) <= 1e-5);
    }
  }
  const int64_t n = 7, in = 1031, out = 33;
  Tensor x = uniform({n, in}, 1), w = uniform({out, in}, 2), b = uniform({out}, 3);
  // With TF32 allowed the result is still close (about 1e-3 at worst), just not fp32-exact.
  Tensor gy = poisoned({n, out}, dev());
  Context tf32 = gpu(true);
  ops::linear_forward(tf32, gy, x.to(dev()), w.to(dev()), nullptr);
  CHECK(norm_rel_diff(gy, linear_reference(x, w, nullptr)) <= 5e-3);
}

TEST_CASE("cuda linear_backward accumulates like the reference, null gradients are skipped") {
  Context c = reference(), g = gpu();
  const int64_t n = 13, in = 129, out = 37;
  Tensor x = uniform({n, in}, 4), w = uniform({out, in}, 5), dy = uniform({n, out}, 6);
  Tensor dx0 = uniform({n, in}, 7), dw0 = uniform({out, in}, 8), db0 = uniform({out}, 9);
  Tensor dx = dx0.clone(), dw = dw0.clone(), db = db0.clone();
  Tensor gdx = dx0.to(dev()), gdw = dw0.to(dev()), gdb = db0.to(dev());
  Tensor gx = x.to(dev()), gw = w.to(dev()), gdy = dy.to(dev());
  ops::linear_backward(c, &dx, &dw, &db, dy, x, w, ops::DxMode::add);
  ops::linear_backward(g, &gdx, &gdw, &gdb, gdy, gx, gw, ops::DxMode::add);
  CHECK(norm_rel_diff(gdx, dx) <= 1e-5);
  CHECK(norm_rel_diff(gdw, dw) <= 1e-5);
  CHECK(norm_rel_diff(gdb, db) <= 1e-5);
  ops::linear_backward(c, nullptr, &dw, nullptr, dy, x, w, ops::DxMode::add);
  ops::linear_backward(g, nullptr, &gdw, nullptr, gdy, gx, gw, ops::DxMode::add);
  CHECK(norm_rel_diff(gdw, dw) <= 1e-5);
  CHECK(norm_rel_diff(gdx, dx) <= 1e-5);  // untouched by the second call on both sides
  Tensor over = Tensor::empty({n, in}), gover = poisoned({n, in}, dev());  // written over: NaN gone
  ops::linear_backward(c, &over, nullptr, nullptr, dy, x, w, ops::DxMode::overwrite);
  ops::linear_backward(g, &gover, nullptr, nullptr, gdy, gx, gw, ops::DxMode::overwrite);
  CHECK(norm_rel_diff(gover, over) <= 1e-5);
}

// The bias gradient sums rows in chunks of 512 then the chunks in order: several chunks (the last
// one short) and column blocks (the last one short), against the reference, and the same bits twice.
TEST_CASE("cuda linear_backward's bias gradient over many rows: chunked sums match, and repeat bit for bit") {
  Context c = reference(), g = gpu();
  for (int64_t rows : {int64_t{1}, int64_t{511}, int64_t{512}, int64_t{3 * 512 + 77}}) {
    CAPTURE(rows);
    const int64_t in = 5, out = 70;
    Tensor x = uniform({rows, in}, 20), w = uniform({out, in}, 21), dy = uniform({rows, out}, 22);
    Tensor db0 = uniform({out}, 23), db = db0.clone(), gdb = db0.to(dev()), again = db0.to(dev());
    ops::linear_backward(c, nullptr, nullptr, &db, dy, x, w, ops::DxMode::add);
    ops::linear_backward(g, nullptr, nullptr, &gdb, dy.to(dev()), x.to(dev()), w.to(dev()), ops::DxMode::add);
    ops::linear_backward(g, nullptr, nullptr, &again, dy.to(dev()), x.to(dev()), w.to(dev()), ops::DxMode::add);
    CHECK(norm_rel_diff(gdb, db) <= 1e-5);
    CHECK(gdb.to(Device::cpu()).to_vector() == again.to(Device::cpu()).to_vector());
  }
}

TEST_CASE("cuda matmul: every transpose, batched, alpha and beta, matches the reference") {
  Context c = reference(), g = gpu();
  const int64_t M = 17, K = 33, N = 9;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Shape sa = ta ? Shape{2, 3, K, M} : Shape{2, 3, M, K};
      Shape sb = tb ? Shape{2, 3, N, K} : Shape{2, 3, K, N};
      Tensor a = uniform(sa, 10), b = uniform(sb, 11), c0 = uniform({2, 3, M, N}, 12);
      Tensor cc = c0.clone(), gc = c0.to(dev());
      ops::matmul(c, cc, a, b, ta, tb, 0.7f, 0.3f);
      ops::matmul(g, gc, a.to(dev()), b.to(dev()), ta, tb, 0.7f, 0.3f);
      CHECK(norm_rel_diff(gc, cc) <= 1e-5);
      // beta = 0 must ignore what c held (here NaN).
      Tensor c2 = Tensor::empty({2, 3, M, N}), gc2 = poisoned({2, 3, M, N}, dev());
      ops::matmul(c, c2, a, b, ta, tb, 1.f, 0.f);
      ops::matmul(g, gc2, a.to(dev()), b.to(dev()), ta, tb, 1.f, 0.f);
      CHECK(norm_rel_diff(gc2, c2) <= 1e-5);
    }
  // A single (unbatched) product and a mismatch error.
  Tensor a = uniform({5, 3}, 13), b = uniform({3, 4}, 14);
  Tensor cc = Tensor::empty({5, 4}), gc = poisoned({5, 4}, dev());
  ops::matmul(c, cc, a, b, false, false, 1.f, 0.f);
  ops::matmul(g, gc, a.to(dev()), b.to(dev()), false, false, 1.f, 0.f);
  CHECK(norm_rel_diff(gc, cc) <= 1e-5);
  Tensor bad = Tensor::empty({5, 5}, DType::f32, dev());
  CHECK_THROWS_AS(ops::matmul(g, bad, a.to(dev()), b.to(dev()), false, false, 1.f, 0.f), Error);
}
