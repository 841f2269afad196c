// Context: passed explicitly to every op. It says which device runs the op and with what:
// for the CPU, how many threads the op may use and which kernels (the fast ones, or the plain
// reference loops of kernels/ref/); for CUDA, the stream, library handles and workspace
// (core/cuda/context.hpp). No hidden global state, so replicas run side by side.
#pragma once
#include "core/device.hpp"
#include "core/dtype.hpp"

namespace dpx {

namespace cuda { struct CudaState; }
class Tensor;

struct Context {
  Device device;
  int threads = 1;                     // CPU threads an op may use (cores / ranks)
  bool reference = false;              // host ops run kernels/ref/, not kernels/cpu/ (--devices ref)
  cuda::CudaState* cuda = nullptr;     // owned elsewhere; set only when device is CUDA
  bool allow_tf32 = false;             // TF32 tensor-core math only when asked (--tf32)
  bool deterministic = false;          // CUDA: deterministic algorithms, no float atomics (--deterministic)
  // CUDA: cuDNN's convolution algorithms by timing every candidate once per shape (--cudnn-algo
  // search, PyTorch's cudnn.benchmark = True); false: cuDNN's heuristics (PyTorch's default).
  bool conv_search = false;
  // CUDA: the dtype convolutions and matrix products round their operands to (--precision bf16 or
  // fp16: tensor-core math, fp32 accumulation into fp32 outputs); f32 = no rounding. Every other op
  // computes in fp32, and the weights stay fp32 (PyTorch's autocast lists the same ops).
  DType compute = DType::f32;
  // With compute bf16 or fp16: whether the maps convolutions, batch norms and ReLUs hand each other
  // are kept in that dtype (kernels/ops.def, "half-precision maps"; nn::forward_children decides).
  // DPX_HALF_MAPS=0 keeps them fp32, as before 2026-11-29: a diagnostic, to compare the two.
  bool half_maps = true;
  // A CUDA graph's replay count, an i64 scalar on `device` that the graph itself increments
  // (parallel/train/graph_step.hpp): the random ops (dropout_forward, bernoulli_scale) add it
  // to their stream, so each replay of a captured step draws its own step's masks. Null (every
  // eager step): no offset. Owned elsewhere.
  const Tensor* random_offset = nullptr;

  static Context cpu(int threads = 1) {
    Context c;
    c.threads = threads < 1 ? 1 : threads;
    return c;
  }
  // The reference kernels: plain single-threaded loops, slow, for teaching and for checking.
  static Context ref() {
    Context c;
    c.reference = true;
    return c;
  }
};

}  // namespace dpx
