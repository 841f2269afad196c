// GPU tests of the smooth activations (sigmoid, SiLU, GELU) and of broadcasting add/multiply
// with their backward, against the CPU ops. The GPU side calls dpx::cuda:: directly, so these
// run whether or not kernels/ops.cpp dispatches the op to CUDA yet.
#include <doctest/doctest.h>

#include "kernels/cuda/cuda_ops.hpp"
#include "tests/cuda/gpu_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

TEST_CASE("cuda sigmoid, silu and gelu forward and backward match the reference") {
  Context c = reference(), g = gpu();
  const Shape shape{3, 5, 13, 13};
  Tensor x = uniform(shape, 1, -8.f, 8.f), dy = uniform(shape, 2), dx0 = uniform(shape, 3);
  Tensor gx = x.to(dev()), gdy = dy.to(dev());
  using Fwd = void (*)(Context&, Tensor&, const Tensor&);
  using Bwd = void (*)(Context&, Tensor&, const Tensor&, const Tensor&, ops::DxMode);
  struct Fn { const char* name; Fwd cpu_f, gpu_f; Bwd cpu_b, gpu_b; bool uses_output; };
  for (Fn f : {Fn{"sigmoid", ops::sigmoid_forward, cuda::sigmoid_forward, ops::sigmoid_backward, cuda::sigmoid_backward, true},
               Fn{"silu", ops::silu_forward, cuda::silu_forward, ops::silu_backward, cuda::silu_backward, false},
               Fn{"gelu", ops::gelu_forward, cuda::gelu_forward, ops::gelu_backward, cuda::gelu_backward, false}}) {
    CAPTURE(f.name);
    Tensor y = Tensor::empty(shape), gy = poisoned(shape, dev());
    f.cpu_f(c, y, x);
    f.gpu_f(g, gy, gx);
    // expf/erff on the GPU are within 2 ulp of the correctly rounded value; so is libm.
    check_close(gy, y, 1e-5);
    for (ops::DxMode mode : {ops::DxMode::add, ops::DxMode::overwrite}) {
      Tensor dx = dx0.clone(), gdx = mode == ops::DxMode::add ? dx0.to(dev()) : poisoned(dx0.shape(), dev());
      f.cpu_b(c, dx, dy, f.uses_output ? y : x, mode);
      f.gpu_b(g, gdx, gdy, f.uses_output ? gy : gx, mode);
      check_close(gdx, dx, 1e-5);
    }
  }
}

TEST_CASE("cuda add_broadcast and mul_broadcast forward and backward match the reference") {
  Context c = reference(), g = gpu();
  struct Case { Shape out, a, b; };
  uint64_t seed = 10;
  // A value per plane takes a block row per plane where a plane holds a block's worth of values:
  // floats (845 and 400 values), float4s (1,056), either operand the per-plane one.
  for (const Case& k : {Case{{3, 5, 13, 13}, {3, 5, 13, 13}, {3, 5, 1, 1}},    // squeeze-excitation
                        Case{{3, 5, 13, 13}, {3, 5, 13, 13}, {3, 1, 1, 1}},    // stochastic depth
                        Case{{2, 3, 20, 20}, {2, 3, 20, 20}, {2, 3, 1, 1}},
                        Case{{2, 3, 32, 33}, {2, 3, 32, 33}, {2, 3, 1, 1}},
                        Case{{2, 3, 32, 33}, {2, 3, 1, 1}, {2, 3, 32, 33}},
                        Case{{4, 3, 7, 7}, {1, 3, 7, 7}, {4, 1, 7, 7}},        // Swin bias + mask
                        Case{{2, 3, 5, 7}, {2, 1, 5, 1}, {1, 3, 1, 7}},        // both broadcast
                        Case{{6, 4099}, {6, 4099}, {1, 4099}},                 // long reduced rows
                        Case{{2, 9000}, {2, 1}, {2, 9000}},                    // a long innermost sum
                        Case{{1, 1}, {1, 1}, {1, 1}},
                        // Swin's relative-position bias at scale: a long sum per bias element, split
                        // into chunks (2 and then 33 of them) that are added in order
                        Case{{64, 3, 7, 7}, {1, 3, 7, 7}, {64, 3, 7, 7}},
                        Case{{1051, 2, 7, 7}, {1, 2, 7, 7}, {1051, 1, 7, 7}}}) {
    CAPTURE(shape_str(k.out));
    CAPTURE(shape_str(k.b));
    Tensor a = uniform(k.a, ++seed), b = uniform(k.b, ++seed), dy = uniform(k.out, ++seed);
    Tensor ga = a.to(dev()), gb = b.to(dev()), gdy = dy.to(dev());
    for (bool mul : {false, true}) {
      CAPTURE(mul);
      Tensor out = Tensor::empty(k.out), gout = poisoned(k.out, dev());
      (mul ? ops::mul_broadcast : ops::add_broadcast)(c, out, a, b);
      (mul ? cuda::mul_broadcast : cuda::add_broadcast)(g, gout, ga, gb);
      CHECK(bitwise_equal(gout, out));  // one rounded product or sum an element, on both sides
      Tensor da0 = uniform(k.a, ++seed), db0 = uniform(k.b, ++seed);
      Tensor da = da0.clone(), db = db0.clone(), gda = da0.to(dev()), gdb = db0.to(dev());
      if (mul) {
        ops::mul_broadcast_backward(c, &da, &db, dy, a, b);
        cuda::mul_broadcast_backward(g, &gda, &gdb, gdy, ga, gb);
      } else {
        ops::add_broadcast_backward(c, &da, &db, dy);
        cuda::add_broadcast_backward(g, &gda, &gdb, gdy);
      }
      // Both sum in double; only the order differs, so the float results agree to rounding.
      check_close(gda, da, 1e-5);
      check_close(gdb, db, 1e-5);
    }
  }
  Tensor a = Tensor::empty({2, 3}, DType::f32, dev()), b = Tensor::empty({3, 2}, DType::f32, dev());
  Context gg = gpu();
  // Shapes are checked once, by the ops dispatcher (kernels/op_checks.cpp), before any backend runs.
  CHECK_THROWS_WITH_AS(ops::add_broadcast(gg, a, a, b), doctest::Contains("does not broadcast"), Error);
}
