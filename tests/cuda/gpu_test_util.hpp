// Helpers for the GPU suite: one CudaState for cuda:0 and the contexts and device the tests run
// on. Inputs and comparisons are the common ones (tests/common/): max_rel_diff / check_close for
// ops whose every output is a short computation, norm_rel_diff for GEMM- and reduction-based ops
// (linear, matmul, conv, batch-norm gradients): cuBLAS/cuDNN sum hundreds of products in another
// order than the reference, so a single output that nearly cancels can differ far more than 1e-5
// relative to itself while the result as a whole agrees to fp32 rounding (about sqrt(K) * 6e-8);
// TF32 would give about 1e-4 to 1e-3.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <thread>

#include "core/cuda/context.hpp"
#include "core/tensor.hpp"
#include "kernels/ops.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"

namespace dpx::testing {

// Leaked on purpose: destroying handles after main() returns races the CUDA runtime's teardown.
inline cuda::CudaState& state() {
  static cuda::CudaState* st = cuda::make_cuda_state(0).release();
  return *st;
}

// fp32 without TF32 unless a test asks for it: the oracle's results are fp32 references.
inline Context gpu(bool allow_tf32 = false) { return cuda::make_cuda_context(state(), allow_tf32); }
// The oracle every CUDA kernel is compared against: the reference kernels (kernels/ref/), the
// same oracle the CPU kernels are tested against (tests/kernels/test_ref.cpp).
inline Context reference() { return Context::ref(); }
// The fast CPU kernels, for whole models (tests/cuda/test_zoo_models.cpp), where the reference
// loops would be slow: up to 8 threads (the zoo test's CPU side outran a 110 s budget on 2 threads
// of a 16-core GPU machine, 2026-11-26).
inline Context cpu() { return Context::cpu(static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u))); }
inline Device dev() { return Device::cuda(0); }

}  // namespace dpx::testing
