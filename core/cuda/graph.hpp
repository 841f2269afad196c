// A CUDA graph captured from one stream and replayed on it (dpx train --cuda-graph): a step's
// hundreds of kernel launches become one cudaGraphLaunch.
//
// Between begin_capture and end_capture the work this thread queues on the stream is recorded,
// not run, and the thread is inside a capture::Scope (core/capture.hpp): a host read in the
// captured work throws a CaptureError naming it. Tensors made meanwhile come from the graph's own
// pool of the caching allocator (core/cuda/memory.hpp, retain_pool): each replay writes the same
// addresses, and no other work is handed those blocks while the graph lives. Replays must see
// their inputs where the capture read them: the caller copies each step's batch into the tensors
// the capture used, and keeps every tensor the captured work reads (the parameters, the saved
// activations' pool) alive.
//
// Compiled in CUDA builds only (core/cuda/graph.cpp); its callers are too.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>

#include "core/capture.hpp"
#include "core/cuda/memory.hpp"

struct CUgraph_st;
struct CUgraphExec_st;

namespace dpx::cuda {

// A device's capture gate. A stream being captured records the work of every thread, not only
// the capturing one's: a capture holds its device's gate alone from begin_capture to its end, and
// a thread that may queue on a captured stream from outside the step (the data loader's copy
// engine, marking a batch buffer's release on the consumer's stream) holds it shared meanwhile,
// so that its call waits for the capture to end instead of joining (and breaking) the graph.
std::shared_mutex& capture_gate(int device);

class Graph {
 public:
  Graph(int device, Stream stream);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts recording `stream` (thread-local capture mode) for `purpose` ("--cuda-graph"), with
  // this thread's allocations on the device taken from the graph's pool.
  void begin_capture(const std::string& purpose);
  // Ends the recording and instantiates the graph. If the capture failed (a CUDA call that cannot
  // be captured, an error in the recorded work), throws with CUDA's reason; `abandon_capture`
  // ends a capture that an exception interrupted without instantiating.
  void end_capture();
  void abandon_capture() noexcept;
  bool capturing() const { return capture_scope_.has_value(); }
  bool ready() const { return exec_ != nullptr; }

  // Queues one replay on the stream (asynchronous, as the kernels it stands for).
  void replay();
  size_t nodes() const { return nodes_; }  // kernels, copies, memsets and event records

 private:
  int device_;
  Stream stream_;
  CUgraph_st* graph_ = nullptr;
  CUgraphExec_st* exec_ = nullptr;
  size_t nodes_ = 0;
  std::optional<capture::Scope> capture_scope_;
  std::optional<AllocationStreamScope> pool_scope_;
  std::unique_lock<std::shared_mutex> gate_;  // held while capturing (capture_gate)
};

}  // namespace dpx::cuda
