// Tensor: a cheap value type — shape, dtype, device, and a shared storage with an offset.
// Always contiguous, row-major (NCHW for images). Views share storage: slice() along the
// first dimension (what scatter uses) and view() with another shape of the same size.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

namespace dpx {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// One allocation. Freed through the allocator that made it when the last Tensor lets go.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  void (*release)(void* data, size_t bytes, Device device) = nullptr;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

// Allocates bytes on a device: 64-byte aligned host memory from the host block cache, or the CUDA
// caching allocator. Host blocks are not zeroed (Tensor::zeros zeroes its own).
//
// The host block cache (core/host_cache.hpp): freed host memory is kept for later allocations —
// small blocks (under 1 MiB) by size, large ones carved best-fit out of segments, split and
// merged — so a training step, which allocates the same sizes every step, stops asking the
// system for memory after its first steps. At most DPX_HOST_CACHE_MB MiB of free blocks
// (environment; default half the machine's memory, at least 4096; under ASan 0; 0 turns the
// cache off) wait there; beyond that free small blocks and wholly free segments go back to the
// system. Thread-safe.
std::shared_ptr<Storage> allocate_storage(size_t bytes, Device device);
// Bytes of host storage alive right now, over every thread (what cuda::bytes_in_use is for a
// GPU): `dpx models` measures the activation memory a forward leaves for backward with it.
// Blocks waiting in the cache are not in use.
size_t host_bytes_in_use();
// Bytes of freed host blocks the cache holds for reuse.
size_t host_bytes_cached();
// The host's high-water marks since the process started or the last reset_memory_peaks(), as
// PyTorch's max_memory_allocated / max_memory_reserved: the most bytes of live host tensors at
// once, and the most the allocator held from the system at once (small blocks rounded up to 64
// bytes and the segments large ones are carved from, live and free alike). Process-wide: thread
// ranks share them.
size_t host_peak_bytes_in_use();
size_t host_bytes_reserved();
size_t host_peak_bytes_reserved();

// A rank's high-water marks: the host's (process-wide) and, for a GPU, its device's (the caching
// allocator's in use and held), in bytes.
struct MemoryPeaks {
  uint64_t host_allocated = 0, host_reserved = 0, device_allocated = 0, device_reserved = 0;
  void raise_to(const MemoryPeaks& o);  // each field the larger of the two
};
MemoryPeaks memory_peaks(Device device);
// Where a run's measurement starts (train() calls it): gives every cached block back, on the host
// and on every GPU, then sets every high-water mark to what is live (and held) now, so a run's
// reserved peak is its own, not what an earlier run of the process left cached.
void reset_memory_peaks();
// A second mark of bytes in use on `device` (the host's live tensors, or a GPU allocator's bytes in
// use), reset on its own: the op profiler's, which names the op during which the measured steps
// reached their most (kernels/op_profile.hpp).
size_t window_peak_bytes(Device device);
void reset_window_peaks();  // the host's and every GPU's, to what is in use now
// How many host blocks allocate_storage has asked the system for since the process started
// (cache hits not counted): tests check that steady-state training asks for none.
uint64_t host_system_allocations();
// Gives every cached host block back to the system.
void empty_host_cache();
// The most bytes the cache keeps (DPX_HOST_CACHE_MB; 0: the cache is off, as by default under
// AddressSanitizer, where reusing a block at once would hide a use after free).
size_t host_cache_cap_bytes();
// The most the host block cache may hold from the system, live and free (0, the default: no
// limit): before it asks for a segment past it, it gives free blocks back (HostCache's reserve
// limit). `dpx bench` and `dpx train` set it to --memory-budget.
void set_host_reserve_limit(size_t bytes);
size_t host_reserve_limit();
// Bytes the cache gave back to stay within that limit since the process started (each such block
// is asked of the system again when needed: page faults a step pays at the budget's edge).
size_t host_bytes_released_for_limit();

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // A host f32 tensor holding `values` (its size must match the shape).
  static Tensor from(const Shape& shape, std::initializer_list<float> values);
  static Tensor from(const Shape& shape, const std::vector<float>& values);
  // A tensor over storage allocated elsewhere (the data loader's pinned host batches): the
  // storage's release function frees it when the last tensor lets go. It must hold the shape.
  static Tensor on_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;  // negative d counts from the end
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::cpu(); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  size_t offset_bytes() const { return offset_bytes_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw() const { return static_cast<char*>(storage_->data) + offset_bytes_; }
  template <typename T>
  T* data() const {
    DPX_CHECK(dtype_of<T>() == dtype_, "tensor holds ", dtype_name(dtype_), ", asked for ",
              dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Rows [begin, end) of the first dimension, sharing storage.
  Tensor slice(int64_t begin, int64_t end) const;
  // The same elements under another shape; one dimension may be -1.
  Tensor view(Shape shape) const;
  // A view of `numel(shape)` elements starting at element `offset` of this tensor.
  Tensor view_at(int64_t offset, const Shape& shape) const;

  // Deep copy onto a device (same dtype). Host<->CUDA copies are synchronous here.
  Tensor to(Device device) const;
  Tensor clone() const { return to(device()); }
  // Copies src's bytes into this tensor (same numel and dtype, any devices).
  void copy_from(const Tensor& src);
  // Host f32 -> another dtype, or back; for safetensors and mixed precision storage.
  Tensor cast(DType dtype) const;

  // Host f32 values as a vector (copies from the device if needed); for tests and printing.
  std::vector<float> to_vector() const;
  float item() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
};

}  // namespace dpx
