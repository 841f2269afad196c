// --deterministic's rules for the CUDA kernels (kernels/determinism.hpp), which the kernels
// apply on a GPU: tested here as functions, without one.
#include <doctest/doctest.h>

#include <string>

#include "kernels/determinism.hpp"

using namespace dpx::kernels;

TEST_CASE("--deterministic keeps cuDNN's deterministic convolution algorithms only; TF32 only when allowed") {
  // want_deterministic, algo_deterministic, allow_tf32, tensor_op_math
  CHECK(conv_algo_usable(false, false, false, false));
  CHECK(conv_algo_usable(false, true, false, false));
  CHECK_FALSE(conv_algo_usable(true, false, false, false));
  CHECK(conv_algo_usable(true, true, false, false));
  CHECK_FALSE(conv_algo_usable(false, true, false, true));  // tensor ops without TF32 allowed
  CHECK(conv_algo_usable(false, true, true, true));
  CHECK_FALSE(conv_algo_usable(true, false, true, true));
  CHECK(conv_algo_usable(true, true, true, true));
}

TEST_CASE("cuDNN graph-API engines: the same rule, and never fp16 inputs, reduced sums or compiling at first use; PyTorch's rule admits the last two") {
  const EngineNotes plain;
  CHECK(conv_engine_usable(plain, false, false));
  CHECK(conv_engine_usable(plain, true, false));
  EngineNotes tc;
  tc.tensor_core = true;
  CHECK_FALSE(conv_engine_usable(tc, false, false));  // fp32 without --tf32: no TF32 engine
  CHECK(conv_engine_usable(tc, false, true));
  EngineNotes nd;
  nd.nondeterministic = true;
  CHECK(conv_engine_usable(nd, false, false));
  CHECK_FALSE(conv_engine_usable(nd, true, false));
  for (bool EngineNotes::*note : {&EngineNotes::down_convert, &EngineNotes::reduced_reduction,
                                  &EngineNotes::runtime_compiled}) {
    EngineNotes e;
    e.*note = true;
    CHECK_FALSE(conv_engine_usable(e, false, true));
    CHECK_FALSE(conv_engine_usable(e, false, false));
  }
  // The reasons DPX_CUDNN_LOG=1 prints for the engines passed over.
  EngineNotes rt;
  rt.runtime_compiled = true;
  CHECK(std::string(conv_engine_refusal(rt, false, true)) == "compiled at first use");
  CHECK(std::string(conv_engine_refusal(tc, false, false)) == "tensor cores not allowed");
  CHECK(std::string(conv_engine_refusal(nd, true, true)) == "not deterministic");
  CHECK(conv_engine_refusal(tc, false, true) == nullptr);
  // PyTorch's rule (DPX_CUDNN_ENGINES=pytorch) admits the engines that sum in less than fp32 or
  // compile at first use, and refuses the rest as dpx's does.
  for (bool EngineNotes::*note : {&EngineNotes::reduced_reduction, &EngineNotes::runtime_compiled}) {
    EngineNotes e;
    e.*note = true;
    CHECK(conv_engine_usable(e, false, true, EngineRule::pytorch));
    CHECK_FALSE(conv_engine_usable(e, false, true, EngineRule::dpx));
  }
  EngineNotes dc;
  dc.down_convert = true;
  CHECK_FALSE(conv_engine_usable(dc, false, true, EngineRule::pytorch));
  CHECK_FALSE(conv_engine_usable(nd, true, true, EngineRule::pytorch));
  CHECK_FALSE(conv_engine_usable(tc, false, false, EngineRule::pytorch));
  CHECK(parse_engine_rule(nullptr) == EngineRule::dpx);
  CHECK(parse_engine_rule("") == EngineRule::dpx);
  CHECK(parse_engine_rule("dpx") == EngineRule::dpx);
  CHECK(parse_engine_rule("pytorch") == EngineRule::pytorch);
  CHECK_THROWS_WITH_AS(parse_engine_rule("PyTorch"),
                       doctest::Contains("DPX_CUDNN_ENGINES='PyTorch': use dpx (the default"), dpx::UsageError);
}

TEST_CASE("--deterministic makes index_select's backward avoid float atomics (max-pool's never uses them)") {
  CHECK(index_select_backward_scans(169, 4, 2401, false));       // Swin's table: a scan anyway
  CHECK_FALSE(index_select_backward_scans(1 << 14, 64, 1 << 14, false));  // large: atomics
  CHECK(index_select_backward_scans(1 << 14, 64, 1 << 14, true));        // unless asked
  CHECK(index_select_backward_scans(10, 10, 10, false, 1000));
  CHECK_FALSE(index_select_backward_scans(10, 10, 11, false, 1000));
}
