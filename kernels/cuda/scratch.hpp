// Device scratch memory for one op (host code: the CUDA kernels' .cu files get it through
// common.cuh, host-only files such as conv_plan.cpp include it alone).
#pragma once
#include <cstddef>

#include "core/cuda/context.hpp"
#include "core/cuda/memory.hpp"

namespace dpx::cuda::detail {

// From the caching allocator's pool of the op's stream: released when the op returns, reused
// only by work queued after this op's kernels.
class Scratch {
 public:
  Scratch(const CudaState& st, size_t bytes)
      : device_(st.device), bytes_(bytes), p_(allocate(bytes, st.device, st.stream)) {}
  ~Scratch() { release(p_, bytes_, device_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  int device_;
  size_t bytes_;
  void* p_;
};

}  // namespace dpx::cuda::detail
