// The host side of CUDA memory: the per-device caching allocator and copies. Implemented in
// core/cuda/memory.cu when dpx is built with CUDA; otherwise each call throws a clear error.
#pragma once
#include <cstddef>

#include "core/device.hpp"

namespace dpx::cuda {

bool available();              // built with CUDA and at least one device present
int device_count();            // 0 when not built with CUDA or no device
void* allocate(size_t bytes, int device);   // from the caching allocator
void release(void* p, size_t bytes, int device);
// Synchronous copy between any two devices (host or CUDA).
void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
void memset_zero(void* p, size_t bytes, int device);
// Bytes the caching allocator holds for a device: in use and cached.
size_t bytes_in_use(int device);
size_t bytes_cached(int device);
void empty_cache(int device);

}  // namespace dpx::cuda
