// The rules --deterministic sets for the CUDA kernels, as plain functions of what the kernels
// know, so that they are tested without a GPU (tests/kernels/test_determinism.cpp). With it, two
// runs on the same GPU give identical weights: cuDNN's deterministic algorithms only, and no
// float atomics (whose sums depend on timing in the last bit); it costs some speed.
#pragma once
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace dpx::kernels {

// Whether a cuDNN convolution algorithm the heuristics offered may run: deterministic ones only
// when asked, and tensor-op math only where allowed: TF32 for fp32 data (--tf32), always for
// bf16/fp16 data (--precision bf16|fp16).
inline bool conv_algo_usable(bool want_deterministic, bool algo_deterministic, bool allow_tensor_ops,
                             bool tensor_op_math) {
  if (want_deterministic && !algo_deterministic) return false;
  return allow_tensor_ops || !tensor_op_math;
}

// What cuDNN's graph API says of an engine (its numerical and behaviour notes), for the rule below.
struct EngineNotes {
  bool tensor_core = false;         // CUDNN_NUMERICAL_NOTE_TENSOR_CORE (TF32 for fp32 data)
  bool down_convert = false;        // CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS (inputs rounded to fp16)
  bool reduced_reduction = false;   // CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION (sums not in fp32)
  bool nondeterministic = false;    // CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
  bool runtime_compiled = false;    // CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION (compiled at first use)
};

// Which graph-API engines a convolution may run on (DPX_CUDNN_ENGINES): dpx's rule (the default)
// or PyTorch's, which admits the two kinds dpx's refuses beside it (below).
enum class EngineRule { dpx, pytorch };

// DPX_CUDNN_ENGINES's value: unset, empty or "dpx", or "pytorch"; anything else is an error.
inline EngineRule parse_engine_rule(const char* value) {
  if (!value || !*value || std::string(value) == "dpx") return EngineRule::dpx;
  if (std::string(value) == "pytorch") return EngineRule::pytorch;
  usage_fail("DPX_CUDNN_ENGINES='", value, "': use dpx (the default: no engine that sums in less than fp32 or ",
             "compiles at first use) or pytorch (PyTorch's rule, which admits both)");
}

// Why a graph-API engine may not run a convolution, or nullptr if it may: the legacy algorithms'
// rule above, and never one that rounds its inputs to fp16; under dpx's rule also never one that
// sums in less than fp32 (dpx accumulates in fp32 for every data type) or compiles a kernel at
// first use (seconds of a first step per shape). PyTorch's filter (Conv_v8.cpp's
// filterEngineConfigs) refuses only the first, and non-deterministic or TF32 engines where not
// allowed: EngineRule::pytorch is that filter, so that a GPU run can time whether dpx's two
// refusals cost speed (scripts/gpu's graph stage), and DPX_CUDNN_LOG=1 prints the reasons of the
// engines passed over (the H200 run of 2026-11-28 did not log them).
inline const char* conv_engine_refusal(const EngineNotes& e, bool want_deterministic, bool allow_tensor_ops,
                                       EngineRule rule = EngineRule::dpx) {
  if (e.down_convert) return "rounds its inputs to fp16";
  if (rule == EngineRule::dpx && e.reduced_reduction) return "sums in less than fp32";
  if (rule == EngineRule::dpx && e.runtime_compiled) return "compiled at first use";
  if (want_deterministic && e.nondeterministic) return "not deterministic";
  if (!allow_tensor_ops && e.tensor_core) return "tensor cores not allowed";
  return nullptr;
}
inline bool conv_engine_usable(const EngineNotes& e, bool want_deterministic, bool allow_tensor_ops,
                               EngineRule rule = EngineRule::dpx) {
  return conv_engine_refusal(e, want_deterministic, allow_tensor_ops, rule) == nullptr;
}

// index_select's backward: scan the index per table element (no atomics, the CPU's order) unless
// the scan's table x index reads pass `max_scan` and determinism was not asked for (then a
// scatter with float atomics).
inline bool index_select_backward_scans(int64_t rows, int64_t cols, int64_t indices, bool want_deterministic,
                                        int64_t max_scan = int64_t(1) << 26) {
  return want_deterministic || rows * cols * indices <= max_scan;
}

// max_pool2d's backward needs no rule: it gathers, without atomics, always (kernels/cuda/pool.cu).

}  // namespace dpx::kernels
