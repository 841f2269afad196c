// The capture guard (core/capture.hpp): inside a capture scope every place that would read the
// device on the host throws a CaptureError naming it and where, outside it nothing changes.
#include <doctest/doctest.h>

#include "core/capture.hpp"
#include "core/tensor.hpp"
#include "kernels/ops.hpp"

using namespace dpx;

TEST_CASE("a capture scope refuses host reads, naming the read and where it happened") {
  Context ctx = Context::cpu();
  Tensor x = Tensor::from({2}, {1.f, 2.f});
  CHECK(!capture::active());
  {
    capture::Scope scope("--cuda-graph");
    CHECK(capture::active());
    Tensor one = Tensor::from({1}, {3.f});
    CHECK_THROWS_WITH_AS(one.item(), doctest::Contains("--cuda-graph: the step cannot be captured into a CUDA graph: "
                                                       "item() reads a value on the host"),
                         capture::CaptureError);
    {
      capture::Where phase("backward");
      CHECK_THROWS_WITH_AS(x.to_vector(), doctest::Contains("to_vector() reads a tensor on the host in backward"),
                           capture::CaptureError);
      // An op that returns a value to the host is named, innermost first.
      CHECK_THROWS_WITH_AS(ops::count_nonfinite(ctx, x),
                           doctest::Contains("its result is read on the host in op count_nonfinite, in backward"),
                           capture::CaptureError);
    }
    CHECK_THROWS_WITH_AS(Tensor::zeros({4}), doctest::Contains("Tensor::zeros clears its memory outside"),
                         capture::CaptureError);
    // Ops that stay on the device pass.
    Tensor y = Tensor::empty({2});
    ops::relu_forward(ctx, y, x);
    CHECK_THROWS_AS(capture::Scope("again"), Error);  // scopes do not nest
  }
  CHECK(!capture::active());
  CHECK(Tensor::from({1}, {5.f}).item() == 5.f);  // after the scope, host reads are back
  CHECK(ops::count_nonfinite(ctx, x) == 0);
}
