// Check macros for every CUDA runtime, cuBLAS, cuDNN and NCCL call: a failure throws dpx::Error
// naming the expression, the library's own error string, file:line and the current device.
// Only compiled in CUDA builds; kernel launches are followed by check_launch().
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

namespace dpx::cuda {

// Throws dpx::Error "<library> error: <expr> failed: <what> at <file>:<line> on cuda:<N>".
[[noreturn]] void throw_library_error(const char* library, const char* expr, const char* what,
                                      const char* file, int line);
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t st, const char* expr, const char* file, int line);
[[noreturn]] void throw_nccl_error(ncclResult_t r, const char* expr, const char* file, int line);

// Reports a failed kernel launch (bad configuration, missing kernel image for this GPU). It does
// not wait for the kernel, so faults inside a kernel surface at the next synchronising call.
inline void check_launch(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, "kernel launch", file, line);
}

}  // namespace dpx::cuda

#define DPX_CUDA_CHECK(expr)                                                           \
  do {                                                                                 \
    cudaError_t dpx_err_ = (expr);                                                     \
    if (dpx_err_ != cudaSuccess)                                                       \
      ::dpx::cuda::throw_cuda_error(dpx_err_, #expr, __FILE__, __LINE__);              \
  } while (0)

#define DPX_CUBLAS_CHECK(expr)                                                         \
  do {                                                                                 \
    cublasStatus_t dpx_st_ = (expr);                                                   \
    if (dpx_st_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::dpx::cuda::throw_cublas_error(dpx_st_, #expr, __FILE__, __LINE__);             \
  } while (0)

#define DPX_CUDNN_CHECK(expr)                                                          \
  do {                                                                                 \
    cudnnStatus_t dpx_st_ = (expr);                                                    \
    if (dpx_st_ != CUDNN_STATUS_SUCCESS)                                               \
      ::dpx::cuda::throw_cudnn_error(dpx_st_, #expr, __FILE__, __LINE__);              \
  } while (0)

#define DPX_NCCL_CHECK(expr)                                                           \
  do {                                                                                 \
    ncclResult_t dpx_r_ = (expr);                                                      \
    if (dpx_r_ != ncclSuccess) ::dpx::cuda::throw_nccl_error(dpx_r_, #expr, __FILE__, __LINE__); \
  } while (0)
