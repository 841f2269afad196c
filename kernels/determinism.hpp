// The rules --deterministic sets for the CUDA kernels, as plain functions of what the kernels
// know, so that they are tested without a GPU (tests/kernels/test_determinism.cpp). With it, two
// runs on the same GPU give identical weights: cuDNN's deterministic algorithms only, and no
// float atomics (whose sums depend on timing in the last bit); it costs some speed.
#pragma once
#include <cstdint>

namespace dpx::kernels {

// Whether a cuDNN convolution algorithm the heuristics offered may run: deterministic ones only
// when asked, and tensor-op math only where allowed: TF32 for fp32 data (--tf32), always for
// bf16/fp16 data (--precision bf16|fp16).
inline bool conv_algo_usable(bool want_deterministic, bool algo_deterministic, bool allow_tensor_ops,
                             bool tensor_op_math) {
  if (want_deterministic && !algo_deterministic) return false;
  return allow_tensor_ops || !tensor_op_math;
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
