// Context: passed explicitly to every op. It says which device runs the op and with what:
// for the CPU, how many threads the op may use; for CUDA, the stream, library handles and
// workspace (core/cuda/context.hpp). No hidden global state, so replicas run side by side.
#pragma once
#include "core/device.hpp"

namespace dpx {

namespace cuda { struct CudaState; }

struct Context {
  Device device;
  int threads = 1;                     // CPU threads an op may use (cores / ranks)
  cuda::CudaState* cuda = nullptr;     // owned elsewhere; set only when device is CUDA
  bool allow_tf32 = false;             // TF32 tensor-core math only when asked (--tf32)

  static Context cpu(int threads = 1) {
    Context c;
    c.threads = threads < 1 ? 1 : threads;
    return c;
  }
};

}  // namespace dpx
