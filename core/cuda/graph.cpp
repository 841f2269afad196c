// CUDA graph capture and replay (see graph.hpp).
#include "core/cuda/graph.hpp"

#include <cuda_runtime.h>

#include "core/cuda/check.hpp"
#include "core/cuda/device_guard.hpp"

namespace dpx::cuda {

namespace {
// The graph's pool key: its own address, which no CUDA stream can have.
Stream pool_key(const Graph* g) { return reinterpret_cast<Stream>(const_cast<Graph*>(g)); }
}  // namespace

std::shared_mutex& capture_gate(int device) {
  static std::shared_mutex gates[64];
  DPX_CHECK(device >= 0 && device < 64, "capture_gate: cuda:", device);
  return gates[device];
}

Graph::Graph(int device, Stream stream) : device_(device), stream_(stream) {
  DPX_CHECK(stream != nullptr, "a CUDA graph is captured from one of dpx's streams, not the legacy default stream");
  retain_pool(device_, pool_key(this));
}

Graph::~Graph() {
  abandon_capture();
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  cudaGetLastError();
  release_pool(device_, pool_key(this));
}

void Graph::begin_capture(const std::string& purpose) {
  DPX_CHECK(!capturing() && !ready(), "a CUDA graph is captured once");
  DeviceGuard guard(device_);
  gate_ = std::unique_lock<std::shared_mutex>(capture_gate(device_));
  // The eager steps' cached blocks are no use to the capture, which allocates from the graph's own
  // pool and cannot free them if it runs out: a cuDNN search's workspaces (as large as half the free
  // memory, kernels/cuda/conv_plan.hpp) would otherwise stay cached through it. (No capture runs on
  // the device while the gate is held, so the allocator's device-wide wait is safe here.)
  try {
    empty_cache(device_);
  } catch (...) {  // the gate is not left held by a capture that never began
    gate_ = {};
    throw;
  }
  capture_scope_.emplace(purpose);
  pool_scope_.emplace(device_, pool_key(this));
  const cudaError_t err = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    pool_scope_.reset();
    capture_scope_.reset();
    gate_ = {};
    throw_cuda_error(err, "cudaStreamBeginCapture", __FILE__, __LINE__);
  }
}

void Graph::end_capture() {
  DPX_CHECK(capturing(), "end_capture without begin_capture");
  DeviceGuard guard(device_);
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream_, &graph);
  pool_scope_.reset();
  capture_scope_.reset();
  gate_ = {};
  if (err != cudaSuccess || graph == nullptr) {
    if (graph) cudaGraphDestroy(graph);
    const char* why = cudaGetErrorString(err);
    cudaGetLastError();
    fail("--cuda-graph: the step could not be captured into a CUDA graph (", why,
         "): some call in it cannot be captured; run without --cuda-graph, and report the model and flags");
  }
  graph_ = graph;
  size_t nodes = 0;
  DPX_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &nodes));
  nodes_ = nodes;
  DPX_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void Graph::abandon_capture() noexcept {
  if (!capturing()) return;
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream_, &graph);  // fails when the capture was invalidated: nothing to keep
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  restore_device(previous);
  pool_scope_.reset();
  capture_scope_.reset();
  gate_ = {};
}

void Graph::replay() {
  DPX_CHECK(ready(), "replay of a CUDA graph that was not captured");
  DeviceGuard guard(device_);
  DPX_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

}  // namespace dpx::cuda
