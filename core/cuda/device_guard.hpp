// Makes a device current for a scope and restores the previous one: the current device is
// per-thread state of the CUDA runtime, and library calls must not change a caller's choice.
#pragma once
#include <cuda_runtime.h>

#include "core/cuda/check.hpp"

namespace dpx::cuda {

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
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace dpx::cuda
