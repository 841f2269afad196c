// The host side of CUDA memory: the per-device caching allocator and copies. Implemented in
// core/cuda/memory.cpp when dpx is built with CUDA; otherwise each call throws a clear error.
// This header stays free of CUDA headers: core/tensor.cpp includes it in every build.
#pragma once
#include <cstddef>
#include <string>

#include "core/context.hpp"
#include "core/device.hpp"

struct CUstream_st;  // the CUDA runtime's stream type: cudaStream_t is CUstream_st*

namespace dpx::cuda {

using Stream = CUstream_st*;  // the same type as cudaStream_t; nullptr is the legacy default stream

bool available();              // built with CUDA and at least one device present
int device_count();            // 0 when not built with CUDA or no device
// Why no CUDA device can be used, as a clause for an error message ("" when one can): not built
// with CUDA, no NVIDIA driver, a driver older than the CUDA runtime dpx was built with, or no GPU.
std::string unavailable_reason();
// cuda:`device`'s compute capability as major * 10 + minor (90 for an H100); throws if none.
int compute_capability(int device);
void* allocate(size_t bytes, int device);   // from the caching allocator
void release(void* p, size_t bytes, int device);
// Synchronous copy between any two devices (host or CUDA). Between two GPUs it waits for the
// work queued on both (their legacy default streams, and so dpx's blocking streams).
void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
void memset_zero(void* p, size_t bytes, int device);
// The device's free and total memory as the driver sees it (cudaMemGetInfo).
void device_memory(int device, size_t* free, size_t* total);
// Bytes the caching allocator holds for a device: in use and cached.
size_t bytes_in_use(int device);
size_t bytes_cached(int device);
void empty_cache(int device);

// ---- stream-ordered use of the caching allocator ---------------------------------------------
// A freed block is reused only by a later allocation for the same stream, so a block freed by
// the host while kernels still read it is only handed to work queued after those kernels.
// allocate(bytes, device) above uses the pool of the legacy default stream (nullptr; see
// AllocationStreamScope below for the exception); dpx's
// CudaState streams synchronise with it (they are created blocking), so tensors made by
// Tensor::empty are safe as long as one CudaState stream works on a device. Several streams
// sharing blocks (a communication stream, a copy stream, two replicas on one GPU) must declare
// each extra stream with record_stream before the block is released.
void* allocate(size_t bytes, int device, Stream stream);
// Several replicas on one GPU (dpx train --backend p2p), each with its own stream: while a scope
// lives, allocate(bytes, device) on this thread takes `stream`'s pool for `device` instead of the
// legacy default stream's, so that a block one replica frees is never handed to another replica's
// work while the first one's kernels may still use it. Scopes nest; each thread has its own.
class AllocationStreamScope {
 public:
  AllocationStreamScope(int device, Stream stream);
  ~AllocationStreamScope();
  AllocationStreamScope(const AllocationStreamScope&) = delete;
  AllocationStreamScope& operator=(const AllocationStreamScope&) = delete;

 private:
  int previous_device_;
  Stream previous_stream_;
};
// Declares that `p` (from this allocator) is also used by work on `stream`: when `p` is released,
// it is reused only after the work queued on `stream` until then has finished.
void record_stream(void* p, int device, Stream stream);
// A CUDA graph's own pool (core/cuda/graph.hpp): allocations made under an AllocationStreamScope
// with `key` (the graph's address, never a real stream) are reused only by later allocations
// under the same key, and while the pool is retained empty_cache and an out-of-memory retry keep
// its blocks: every replay of the graph writes them, whether a tensor still holds them or not.
void retain_pool(int device, Stream key);
void release_pool(int device, Stream key);  // the graph is gone: its blocks are ordinary cache
// Bytes ever in use at once, and ever held (in use and cached) at once, since the start or the
// last reset (for memory reports: PyTorch's max_memory_allocated and max_memory_reserved).
size_t peak_bytes_in_use(int device);
size_t peak_bytes_reserved(int device);
void reset_peak_bytes_in_use(int device);  // both peaks := their current values
// A third mark, of bytes in use, reset on its own (the op profiler's; core/tensor.hpp's window).
size_t window_peak_bytes(int device);
void reset_window_peak(int device);

// ---- pinned host memory (for the data loader's host-to-device copies) -------------------------
// Page-locked host memory from cudaHostAlloc, cached by size because cudaHostAlloc is slow; portable
// (pinned for every GPU). Allocated in `device`'s context: a thread that has chosen no device (a
// data loader's worker) would otherwise create GPU 0's, a few hundred MiB on a GPU the run may not
// use, and fail where GPUs are exclusive to a process.
void* allocate_pinned(size_t bytes, int device);
// No work on a device uses `p` any more: it can be reused at once.
void release_pinned(void* p, size_t bytes);
// `last_use`, a stream of `device`, may still read `p` (an asynchronous copy): the block is reused
// only after that work has finished. The device is passed with the stream, not asked of it
// (cudaStreamGetDevice needs CUDA 12.8).
void release_pinned(void* p, size_t bytes, Stream last_use, int device);
size_t pinned_bytes_cached();

// Asynchronous copy on `stream` between any two devices. Host memory must be pinned for the
// copy to overlap with the host; the caller keeps both buffers alive until the stream gets there.
void copy_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes,
                Stream stream);
// A copy from one GPU to another on `dst_stream` (a stream of dst's GPU) that first waits, on
// the GPU, for the work queued so far on `src_stream` (a stream of src's GPU) that writes src:
// copy_async alone would order the copy after dst's stream only. Either may be on one GPU.
void copy_peer_async(void* dst, int dst_device, Stream dst_stream, const void* src, int src_device, Stream src_stream,
                     size_t bytes);
// Waits until all work queued on `stream` (on `device`) has finished.
void synchronize(Stream stream, int device);

// The stream a Context's ops are queued on: its CudaState's for a GPU, nullptr on the CPU (the data
// loader copies batches ahead of the work on it).
Stream stream_of(const Context& ctx);

}  // namespace dpx::cuda
