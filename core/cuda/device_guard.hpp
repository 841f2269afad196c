// Makes a device current for a scope and restores the previous one: the current device is
// per-thread state of the CUDA runtime, and library calls must not change a caller's choice.
#pragma once
#include <cuda_runtime.h>

#include "core/cuda/check.hpp"

namespace dpx::cuda {

// Makes `previous` the current device again, unless its primary context does not exist yet
// (cuDevicePrimaryCtxGetState): making a device current creates its context (CUDA 12 on), a few
// hundred MiB of that GPU, and a thread that never chose a device reads device 0 as current, so
// putting "0" back would create GPU 0's context in a process that drives another GPU (one process
// per GPU under srun or mpirun; a loader's worker thread). PyTorch's MaybeSetDevice asks the same.
// The current device then stays the one switched to. Never throws.
void restore_device(int previous) noexcept;

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    DPX_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ == device) {
      previous_ = -1;  // nothing to switch or restore: the common case costs one query
    } else {
      DPX_CUDA_CHECK(cudaSetDevice(device));
    }
  }
  ~DeviceGuard() {
    if (previous_ >= 0) restore_device(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace dpx::cuda
