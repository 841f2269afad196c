// CudaState: what a Context needs to run ops on one GPU — its stream, cuBLAS/cuBLASLt/cuDNN
// handles, a workspace that grows on demand and the cuDNN algorithm choices and plans made so far.
// One per replica (rank); not shared between threads. Only compiled in CUDA builds.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/context.hpp"

namespace dpx::cuda {

// A cuDNN algorithm choice, keyed by everything that decides it: the kind of pass, the shapes,
// the convolution parameters and the math mode (kernels/cuda/conv2d.cu fills the key).
struct AlgoKey {
  std::array<int64_t, 21> v{};
  bool operator==(const AlgoKey&) const = default;
};
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the key's values
    for (int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};
struct AlgoChoice {
  int algo = 0;                  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t workspace_bytes = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
};

// A convolution's execution plan through cuDNN's graph API (kernels/cuda/conv_plan.hpp); null: the
// graph API declined it and the legacy call runs.
struct ConvPlan;

struct CudaState {
  int device = 0;
  // Created blocking (not cudaStreamNonBlocking) on purpose: synchronous copies and memsets on
  // the legacy default stream (Tensor::to, Tensor::zeros) are then ordered with this stream.
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublaslt = nullptr;
  cudnnHandle_t cudnn = nullptr;
  std::unordered_map<AlgoKey, AlgoChoice, AlgoKeyHash> conv_algos;
  // The graph API's plans, released before the cuDNN handle they were built with.
  std::unordered_map<AlgoKey, std::shared_ptr<ConvPlan>, AlgoKeyHash> conv_plans;
  // 8 bytes of pinned host memory: the one result an op returns to the host (count_correct).
  int64_t* host_result = nullptr;
  // cuBLAS's workspace, given to the handle (cublasSetWorkspace) as PyTorch does: without one,
  // cuBLAS allocates its own per call, and inside a CUDA graph's capture records those
  // allocations into the graph, beside the caching allocator's pools.
  void* cublas_workspace = nullptr;
  size_t cublas_workspace_bytes = 0;

  CudaState() = default;
  CudaState(const CudaState&) = delete;
  CudaState& operator=(const CudaState&) = delete;
  ~CudaState();

  // At least `bytes` of device scratch, valid for work queued on `stream` until the next call.
  // Grows (never shrinks) by releasing the old block to the caching allocator; the release is
  // stream-ordered, so kernels still queued on the old workspace are not disturbed. Once a CUDA
  // graph has been captured with this state, old blocks are kept instead: replays still use them.
  void* workspace(size_t bytes);
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Sets the cuBLAS math mode for this op: TF32 tensor cores only when allowed.
  void set_cublas_tf32(bool allow);

 private:
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool keep_workspaces_ = false;                          // set by the first capture
  std::vector<std::pair<void*, size_t>> kept_workspaces_;  // released with the state
  int cublas_tf32_ = -1;  // the handle's current mode: -1 unknown, 0 default (fp32), 1 TF32
};

// A stream and handles for cuda:`device`; throws if the device does not exist.
std::unique_ptr<CudaState> make_cuda_state(int device);
// A Context that runs ops on state's device and stream. `state` must outlive the Context.
Context make_cuda_context(CudaState& state, bool allow_tf32 = false);

// The state behind a CUDA Context, with its device made current for this thread. Throws a clear
// error when the Context carries no CudaState or names another device.
CudaState& state_of(const Context& ctx);

}  // namespace dpx::cuda
