// Error messages for the check macros of core/cuda/check.hpp: what failed, the library's own
// explanation, where, and on which device (ranks are threads, so the device tells them apart).
#include "core/cuda/check.hpp"

#include <string>

#include "core/error.hpp"

namespace dpx::cuda {

namespace {
std::string current_device() {
  int d = -1;
  // cudaGetDevice only fails when no driver or device is usable; the message says so.
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    return "an unknown device";
  }
  return "cuda:" + std::to_string(d);
}
}  // namespace

void throw_library_error(const char* library, const char* expr, const char* what, const char* file,
                         int line) {
  fail(library, " error: ", expr, " failed: ", what, " at ", file, ":", line, " on ",
       current_device());
}

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  // Clears the error for non-sticky failures (e.g. out of memory) so later calls start clean.
  cudaGetLastError();
  std::string what = std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
  if (err == cudaErrorNoKernelImageForDevice)
    what += "; rebuild with -DCMAKE_CUDA_ARCHITECTURES set to this GPU's compute capability";
  throw_library_error("CUDA", expr, what.c_str(), file, line);
}

void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line) {
  std::string what = std::string(cublasGetStatusName(st)) + " (" + cublasGetStatusString(st) + ")";
  throw_library_error("cuBLAS", expr, what.c_str(), file, line);
}

void throw_cudnn_error(cudnnStatus_t st, const char* expr, const char* file, int line) {
  char last[512] = {0};
  // cuDNN 9 keeps a more specific message for the last failure of this thread.
  cudnnGetLastErrorString(last, sizeof(last));
  std::string what = cudnnGetErrorString(st);
  if (last[0]) what += std::string(" (") + last + ")";
  throw_library_error("cuDNN", expr, what.c_str(), file, line);
}

void throw_nccl_error(ncclResult_t r, const char* expr, const char* file, int line) {
  std::string what = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last && last[0]) what += std::string(" (") + last + ")";
  throw_library_error("NCCL", expr, what.c_str(), file, line);
}

}  // namespace dpx::cuda
