// Tests of the op layer generated from kernels/ops.def: every misuse is caught once, by the op's
// check in kernels/op_checks.cpp, with the same message whichever backend would have run it;
// tensors on another device are refused; Context::reference runs the reference kernels.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/ops.hpp"
#include "kernels/ref/ref_ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/errors.hpp"
#include "tests/common/tensors.hpp"

using namespace dpx;
using dpx::testing::randn;

namespace {

// The misuse must be refused on the CPU and on the reference context alike, with one message:
// the reference kernels check nothing, so only the op layer can have refused it.
template <class Call>
void check_refused_once(const char* expected, Call call) {
  const std::string on_cpu = dpx::testing::error_of([&] { call(Context::cpu(2)); });
  const std::string on_ref = dpx::testing::error_of([&] { call(Context::ref()); });
  INFO("cpu: " << on_cpu);
  INFO("ref: " << on_ref);
  CHECK(on_cpu.find(expected) != std::string::npos);
  CHECK(on_cpu == on_ref);
}

}  // namespace

TEST_CASE("op layer: every misuse is refused by the op's one check, alike on cpu and ref") {
  check_refused_once("do not fit 2 groups", [](Context ctx) {
    Tensor x = randn({1, 3, 5, 5}, 1), w = randn({4, 1, 3, 3}, 2), y = Tensor::empty({1, 4, 3, 3});
    ops::Conv2dParams p;
    p.groups = 2;
    ops::conv2d_forward(ctx, y, x, w, nullptr, p);
  });
  check_refused_once("does not fit input", [](Context ctx) {
    Tensor x = randn({1, 1, 2, 2}, 1), w = randn({1, 1, 3, 3}, 2), y = Tensor::empty({1, 1, 1, 1});
    ops::conv2d_forward(ctx, y, x, w, nullptr, {});
  });
  check_refused_once("dy has shape (1, 2, 3, 3), expected (1, 4, 3, 3)", [](Context ctx) {
    Tensor x = randn({1, 3, 5, 5}, 1), w = randn({4, 3, 3, 3}, 2), dy = randn({1, 2, 3, 3}, 3);
    Tensor dx = Tensor::zeros({1, 3, 5, 5});
    ops::conv2d_backward(ctx, &dx, nullptr, nullptr, dy, x, w, {}, ops::DxMode::add);
  });
  check_refused_once("has 5 features but w (2, 4) expects 4", [](Context ctx) {
    Tensor x = randn({3, 5}, 1), w = randn({2, 4}, 2), y = Tensor::empty({3, 2});
    ops::linear_forward(ctx, y, x, w, nullptr);
  });
  check_refused_once("must be at most half the kernel", [](Context ctx) {
    Tensor x = randn({1, 1, 6, 6}, 1), y = Tensor::empty({1, 1, 4, 4});
    ops::Pool2dParams p;
    p.pad_h = p.pad_w = 2;
    ops::avg_pool2d_forward(ctx, y, x, p);
  });
  check_refused_once("labels (3) must be i64", [](Context ctx) {
    Tensor logits = randn({3, 4}, 1), probs = Tensor::empty({3, 4}), loss = Tensor::empty({1});
    Tensor labels = Tensor::zeros({3}, DType::i32);
    ops::cross_entropy_forward(ctx, loss, probs, logits, labels);
  });
  check_refused_once("label_smoothing 2 must lie in [0, 1]", [](Context ctx) {
    Tensor logits = randn({3, 4}, 1), probs = Tensor::empty({3, 4}), loss = Tensor::empty({1});
    Tensor labels = Tensor::zeros({3}, DType::i64);
    ops::cross_entropy_forward(ctx, loss, probs, logits, labels, 2.f);
  });
  check_refused_once("must have the shape of the trailing dimensions of x", [](Context ctx) {
    Tensor x = randn({2, 3, 4}, 1), y = Tensor::empty({2, 3, 4}), bias = randn({3, 3}, 2);
    ops::softmax_forward(ctx, y, x, &bias);
  });
  check_refused_once("the inputs have 5 channels in all", [](Context ctx) {
    Tensor a = randn({2, 2, 3}, 1), b = randn({2, 3, 3}, 2), out = Tensor::empty({2, 4, 3});
    ops::concat_channels(ctx, out, {a, b});
  });
  check_refused_once("Nesterov momentum requires a momentum", [](Context ctx) {
    Tensor w = randn({4}, 1), g = randn({4}, 2), buf = Tensor::zeros({4});
    ops::SgdParams p;
    p.nesterov = true;
    ops::sgd_step(ctx, w, g, buf, p, true, nullptr, nullptr);
  });
  check_refused_once("mask (6) must be u8, got f32", [](Context ctx) {
    Tensor x = randn({6}, 1), y = Tensor::empty({6}), mask = Tensor::empty({6});
    ops::dropout_forward(ctx, y, mask, x, 0.5f, 1, 2);
  });
}

TEST_CASE("op layer: a tensor on another device is refused before any check or kernel") {
  Context ctx = Context::cpu();
  ctx.device = Device::cuda(0);  // the op is asked to run on a GPU; the tensors live on the host
  Tensor out = Tensor::empty({4});
  CHECK_THROWS_WITH_AS(ops::fill(ctx, out, 1.f),
                       doctest::Contains("fill: a tensor on cpu was passed to an op running on cuda:0"), Error);
}

TEST_CASE("op layer: Context::reference runs kernels/ref/, the default context kernels/cpu/") {
  // A long reduction: the CPU GEMM sums in f32 tiles, the reference in double, so the two
  // results differ in their last bits and show which kernel ran.
  Tensor x = randn({8, 2048}, 1), w = randn({16, 2048}, 2);
  Tensor via_cpu = Tensor::empty({8, 16}), via_ref = Tensor::empty({8, 16});
  Tensor direct_cpu = Tensor::empty({8, 16}), direct_ref = Tensor::empty({8, 16});
  Context cpu = Context::cpu(2), ref = Context::ref();
  ops::linear_forward(cpu, via_cpu, x, w, nullptr);
  ops::linear_forward(ref, via_ref, x, w, nullptr);
  cpu::linear_forward(cpu, direct_cpu, x, w, nullptr);
  ref::linear_forward(ref, direct_ref, x, w, nullptr);
  CHECK(dpx::testing::bitwise_equal(via_cpu, direct_cpu));
  CHECK(dpx::testing::bitwise_equal(via_ref, direct_ref));
  REQUIRE_FALSE(dpx::testing::bitwise_equal(direct_cpu, direct_ref));  // else this test shows nothing
  dpx::testing::check_close(via_ref, via_cpu, 1e-4);
}
