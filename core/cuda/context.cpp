// Creation and teardown of CudaState (stream, cuBLAS, cuBLASLt and cuDNN handles) and its
// growing workspace. Teardown never throws: it runs from destructors, also during unwinding.
#include "core/cuda/context.hpp"

#include <cuda.h>

#include "core/capture.hpp"
#include "core/cuda/check.hpp"
#include "core/cuda/device_guard.hpp"
#include "core/cuda/memory.hpp"
#include "core/error.hpp"

namespace dpx::cuda {

namespace {
// The driver's cuDevicePrimaryCtxGetState, found through the runtime (dpx does not link the
// driver library: a machine without a GPU has none); null where the driver lacks it.
using PrimaryCtxGetState = CUresult (*)(CUdevice, unsigned int*, int*);
PrimaryCtxGetState primary_ctx_get_state() {
  static const PrimaryCtxGetState fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return PrimaryCtxGetState(nullptr);
    }
    return reinterpret_cast<PrimaryCtxGetState>(p);
  }();
  return fn;
}
}  // namespace

void restore_device(int previous) noexcept {
  if (previous < 0) return;
  if (const PrimaryCtxGetState get_state = primary_ctx_get_state()) {
    unsigned int flags = 0;
    int active = 0;
    // The device ordinal is the driver's CUdevice (both count the devices CUDA_VISIBLE_DEVICES shows).
    if (get_state(static_cast<CUdevice>(previous), &flags, &active) == CUDA_SUCCESS && active == 0) return;
  }
  cudaSetDevice(previous);
}

CudaState::~CudaState() {
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  if (stream) cudaStreamSynchronize(stream);  // queued kernels may use the workspace
  conv_plans.clear();                          // before the cuDNN handle they were built with
  if (workspace_) release(workspace_, workspace_bytes_, device);
  for (const auto& [p, bytes] : kept_workspaces_) release(p, bytes, device);
  if (cublas_workspace) release(cublas_workspace, cublas_workspace_bytes, device);
  if (host_result) cudaFreeHost(host_result);
  if (cudnn) cudnnDestroy(cudnn);
  if (cublaslt) cublasLtDestroy(cublaslt);
  if (cublas) cublasDestroy(cublas);
  if (stream) cudaStreamDestroy(stream);
  cudaGetLastError();
  restore_device(previous);
}

void* CudaState::workspace(size_t bytes) {
  // A CUDA graph captured with this workspace writes it at every replay: from the first capture
  // on, a workspace that grows is kept, never handed back to the allocator for other tensors.
  if (capture::active()) keep_workspaces_ = true;
  if (bytes <= workspace_bytes_) return workspace_;
  DeviceGuard guard(device);
  if (workspace_ && keep_workspaces_) kept_workspaces_.push_back({workspace_, workspace_bytes_});
  else if (workspace_) release(workspace_, workspace_bytes_, device);
  workspace_ = nullptr;
  workspace_bytes_ = 0;
  workspace_ = allocate(bytes, device, stream);
  workspace_bytes_ = bytes;
  return workspace_;
}

void CudaState::set_cublas_tf32(bool allow) {
  int want = allow ? 1 : 0;
  if (cublas_tf32_ == want) return;
  // Default math keeps fp32 GEMMs in full fp32 precision; TF32 must be asked for explicitly.
  DPX_CUBLAS_CHECK(cublasSetMathMode(cublas, allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  cublas_tf32_ = want;
}

std::unique_ptr<CudaState> make_cuda_state(int device) {
  int count = device_count();
  if (device < 0 || device >= count)
    fail("cuda:", device, " does not exist: this machine has ", count, " CUDA device", count == 1 ? "" : "s",
         count == 0 ? " (" + unavailable_reason() + ")" : std::string());
  DeviceGuard guard(device);
  auto st = std::make_unique<CudaState>();
  st->device = device;
  DPX_CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamDefault));
  DPX_CUBLAS_CHECK(cublasCreate(&st->cublas));
  DPX_CUBLAS_CHECK(cublasSetStream(st->cublas, st->stream));
  // PyTorch's default sizes (CUBLAS_WORKSPACE_CONFIG): 32 MiB from Hopper on, else 4 MiB x 2 +
  // 16 KiB x 8.
  int major = 0;
  DPX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  st->cublas_workspace_bytes = major >= 9 ? size_t(32) << 20 : (size_t(8) << 20) + (size_t(128) << 10);
  st->cublas_workspace = allocate(st->cublas_workspace_bytes, device, st->stream);
  DPX_CUBLAS_CHECK(cublasSetWorkspace(st->cublas, st->cublas_workspace, st->cublas_workspace_bytes));
  st->set_cublas_tf32(false);
  DPX_CUBLAS_CHECK(cublasLtCreate(&st->cublaslt));
  DPX_CUDNN_CHECK(cudnnCreate(&st->cudnn));
  DPX_CUDNN_CHECK(cudnnSetStream(st->cudnn, st->stream));
  DPX_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&st->host_result), sizeof(int64_t),
                               cudaHostAllocDefault));
  return st;
}

Context make_cuda_context(CudaState& state, bool allow_tf32) {
  Context ctx;
  ctx.device = Device::cuda(state.device);
  ctx.threads = 1;
  ctx.cuda = &state;
  ctx.allow_tf32 = allow_tf32;
  return ctx;
}

Stream stream_of(const Context& ctx) { return ctx.device.is_cuda() && ctx.cuda ? ctx.cuda->stream : nullptr; }

CudaState& state_of(const Context& ctx) {
  if (!ctx.device.is_cuda() || ctx.cuda == nullptr)
    fail("a CUDA op was given a Context for ", ctx.device.str(),
         " without CUDA state; make it with dpx::cuda::make_cuda_context");
  CudaState& st = *ctx.cuda;
  if (st.device != ctx.device.index)
    fail("Context names ", ctx.device.str(), " but its CUDA state belongs to cuda:", st.device);
  int current = -1;
  DPX_CUDA_CHECK(cudaGetDevice(&current));
  if (current != st.device) DPX_CUDA_CHECK(cudaSetDevice(st.device));
  return st;
}

}  // namespace dpx::cuda
