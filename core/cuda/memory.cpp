// The per-device caching allocator (cudaMalloc only, never managed memory), the pinned host
// pool and copies. Freed blocks are kept per (stream, rounded size) and reused, because
// cudaMalloc/cudaFree synchronise the device and cost far more than a training step's kernels.
#include "core/cuda/memory.hpp"
#include "core/gpu_status.hpp"

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/capture.hpp"
#include "core/cuda/check.hpp"
#include "core/cuda/device_guard.hpp"
#include "core/cuda/graph.hpp"
#include "core/error.hpp"

namespace dpx::cuda {

namespace {

// Small requests round to 512 B (PyTorch's granularity); larger ones to whole 2 MiB pages so
// that the sizes seen in a training loop fall into few bins and are found again each step.
constexpr size_t kSmallRound = 512;
constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr size_t kLargeRound = size_t(2) << 20;

size_t round_size(size_t bytes) {
  size_t r = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  if (bytes > SIZE_MAX - r) fail("cannot allocate ", bytes, " bytes: the size overflows (a tensor's element count did?)");
  return (bytes + r - 1) / r * r;
}

std::string mib(size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

// A block released while other streams may still use it: reusable once all events completed.
struct Pending {
  void* ptr;
  size_t size;
  Stream stream;
  std::vector<cudaEvent_t> events;
};

struct Block {
  size_t size;
  Stream stream;                    // the stream whose pool it returns to
  std::vector<Stream> also_used_on;  // declared with record_stream
};

using PoolKey = std::pair<Stream, size_t>;

// While a stream of this thread is captured into a CUDA graph (thread-local mode, core/cuda/
// graph.hpp), cudaMalloc and cudaEventQuery count as unsafe and would invalidate the capture. The
// allocator's own calls are safe: a block it mallocs is not part of the graph but stays in the
// graph's pool for the graph's lifetime. So they run in relaxed mode, as PyTorch's allocator does.
class RelaxedCapture {
 public:
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

class DevicePool {
 public:
  explicit DevicePool(int device) : device_(device) {}

  void* allocate(size_t bytes, Stream stream) {
    size_t size = round_size(bytes);
    std::unique_lock<std::mutex> lock(m_);
    std::optional<RelaxedCapture> relaxed;
    if (capture::active()) relaxed.emplace();
    collect_pending();
    if (void* p = take_free(size, stream)) return p;
    DeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // out of memory is not sticky: clear it and retry with the cache freed
      size_t cached_before = cached_;
      if (is_retained(stream) || capture::active())
        fail("out of GPU memory on cuda:", device_, " while a step was captured into a CUDA graph: asked for ",
             mib(bytes), "; dpx holds ", mib(in_use_), " in use and ", mib(cached_), " cached. Use a smaller "
             "batch, or run without --cuda-graph");
      // free_cached's device-wide synchronize would break a capture another thread is making on
      // this device (--cuda-graph; this thread: a data loader's): wait for it to end, without
      // holding the pool, which the capture allocates from.
      lock.unlock();
      std::shared_lock<std::shared_mutex> gate(capture_gate(device_));
      lock.lock();
      free_cached();
      err = cudaMalloc(&p, size);
      if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fail("out of GPU memory on cuda:", device_, ": asked for ", mib(bytes), " (", bytes,
             " bytes); dpx holds ", mib(in_use_), " in use and had ", mib(cached_before),
             " cached (released and retried); the device has ", mib(free_b), " free of ",
             mib(total_b), ". Use a smaller batch or model, or fewer replicas on this GPU");
      }
    }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
    live_.emplace(p, Block{size, stream, {}});
    add_in_use(size);
    return p;
  }

  // Never throws: it runs from Storage destructors.
  void release(void* p) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = live_.find(p);
    if (it == live_.end()) {
      std::fprintf(stderr, "dpx: warning: release of %p, not allocated on cuda:%d (ignored)\n", p,
                   device_);
      return;
    }
    Block b = std::move(it->second);
    live_.erase(it);
    in_use_ -= b.size;
    cached_ += b.size;
    if (b.also_used_on.empty()) {
      free_[{b.stream, b.size}].push_back(p);
      return;
    }
    Pending pend{p, b.size, b.stream, {}};
    // Events must belong to the streams' device; switched by hand because this must not throw.
    int previous = -1;
    cudaGetDevice(&previous);
    if (previous != device_) cudaSetDevice(device_);
    bool ok = true;
    for (Stream s : b.also_used_on) {
      cudaEvent_t e = take_event();
      if (!e || cudaEventRecord(e, s) != cudaSuccess) {
        if (e) spare_events_.push_back(e);
        ok = false;
        break;
      }
      pend.events.push_back(e);
    }
    if (previous != device_) restore_device(previous);
    if (!ok) {
      // The reuse cannot be ordered after that stream: the block leaves circulation for good
      // rather than hand out memory that may still be read. Its recorded events stay valid.
      cudaGetLastError();
      std::fprintf(stderr, "dpx: warning: could not record a stream event on cuda:%d; a %zu-byte "
                   "block is retired\n", device_, b.size);
      for (cudaEvent_t e : pend.events) spare_events_.push_back(e);
      cached_ -= b.size;
      return;
    }
    pending_.push_back(std::move(pend));
  }

  void record_stream(void* p, Stream stream) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = live_.find(p);
    DPX_CHECK(it != live_.end(), "record_stream: ", p, " is not a live block of cuda:", device_);
    Block& b = it->second;
    if (stream == b.stream) return;
    for (Stream s : b.also_used_on)
      if (s == stream) return;
    b.also_used_on.push_back(stream);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(m_);
    free_cached();
  }

  // A graph's pool (its key, never a real stream): kept out of free_cached while retained.
  void retain(Stream key) {
    std::lock_guard<std::mutex> lock(m_);
    retained_.push_back(key);
  }
  void unretain(Stream key) {
    std::lock_guard<std::mutex> lock(m_);
    std::erase(retained_, key);
  }

  size_t in_use() { std::lock_guard<std::mutex> lock(m_); return in_use_; }
  size_t cached() { std::lock_guard<std::mutex> lock(m_); return cached_; }
  size_t peak() { std::lock_guard<std::mutex> lock(m_); return peak_; }
  size_t peak_reserved() { std::lock_guard<std::mutex> lock(m_); return peak_reserved_; }
  size_t window_peak() { std::lock_guard<std::mutex> lock(m_); return window_peak_; }
  void reset_window_peak() { std::lock_guard<std::mutex> lock(m_); window_peak_ = in_use_; }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(m_);
    peak_ = in_use_;
    peak_reserved_ = in_use_ + cached_;
  }

 private:
  // The pool holds more only when a block goes into use (a new one from cudaMalloc, or one taken
  // from the cache, which holds the same then): both marks move here.
  void add_in_use(size_t size) {
    in_use_ += size;
    if (in_use_ > peak_) peak_ = in_use_;
    if (in_use_ + cached_ > peak_reserved_) peak_reserved_ = in_use_ + cached_;
    if (in_use_ > window_peak_) window_peak_ = in_use_;
  }

  // Exact size for small blocks; for large ones the smallest cached block wasting at most a
  // quarter, so a slightly smaller last batch still reuses the blocks of the full ones.
  void* take_free(size_t size, Stream stream) {
    auto it = free_.lower_bound({stream, size});
    if (it == free_.end() || it->first.first != stream) return nullptr;
    size_t found = it->first.second;
    if (found != size && (size <= kSmallLimit || found > size + size / 4)) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
    live_.emplace(p, Block{found, stream, {}});
    cached_ -= found;
    add_in_use(found);
    return p;
  }

  void collect_pending() {
    for (size_t i = 0; i < pending_.size();) {
      bool done = true;
      for (cudaEvent_t e : pending_[i].events) {
        cudaError_t q = cudaEventQuery(e);
        if (q == cudaErrorNotReady) { done = false; break; }
        if (q != cudaSuccess) throw_cuda_error(q, "cudaEventQuery (caching allocator)", __FILE__, __LINE__);
      }
      if (!done) { ++i; continue; }
      Pending& pd = pending_[i];
      for (cudaEvent_t e : pd.events) spare_events_.push_back(e);
      free_[{pd.stream, pd.size}].push_back(pd.ptr);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    }
  }

  cudaEvent_t take_event() {
    if (!spare_events_.empty()) {
      cudaEvent_t e = spare_events_.back();
      spare_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return e;
  }

  bool is_retained(Stream key) const {
    for (Stream k : retained_)
      if (k == key) return true;
    return false;
  }

  // Waits for the device (queued kernels may still use cached blocks), then frees them, except
  // those of a graph's pool: its replays write them whether a tensor holds them or not.
  void free_cached() {
    DeviceGuard guard(device_);
    DPX_CUDA_CHECK(cudaDeviceSynchronize());
    collect_pending();
    for (auto it = free_.begin(); it != free_.end();) {
      if (is_retained(it->first.first)) {
        ++it;
        continue;
      }
      for (void* p : it->second) {
        DPX_CUDA_CHECK(cudaFree(p));
        cached_ -= it->first.second;
      }
      it = free_.erase(it);
    }
  }

  int device_;
  std::mutex m_;
  std::map<PoolKey, std::vector<void*>> free_;
  std::unordered_map<void*, Block> live_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> spare_events_;
  std::vector<Stream> retained_;  // the pools of live graphs
  size_t in_use_ = 0, cached_ = 0, peak_ = 0, peak_reserved_ = 0, window_peak_ = 0;
};

// The devices, or why there are none (core/gpu_status.hpp words it).
struct DeviceQuery {
  int count = 0;
  std::string reason;
};

DeviceQuery query_devices() {
  DeviceQuery q;
  const cudaError_t err = cudaGetDeviceCount(&q.count);
  if (err == cudaSuccess && q.count > 0) return q;
  cudaGetLastError();
  q.count = 0;
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) cudaGetLastError();
  const DeviceCountResult result = err == cudaSuccess                   ? DeviceCountResult::ok
                                   : err == cudaErrorNoDevice           ? DeviceCountResult::no_device
                                   : err == cudaErrorInsufficientDriver ? DeviceCountResult::insufficient_driver
                                                                        : DeviceCountResult::other;
  q.reason = cuda_unavailable_reason(result, 0, driver, CUDART_VERSION, cudaGetErrorString(err));
  return q;
}

const DeviceQuery& devices() {
  static const DeviceQuery q = query_devices();
  return q;
}

// The pools live for the whole process on purpose (never destroyed): tensors in static objects
// may be released during exit, after function-local statics would have been destroyed.
DevicePool& pool(int device) {
  static const int count = device_count();
  static std::vector<DevicePool*>* pools = [] {
    auto* v = new std::vector<DevicePool*>();
    for (int d = 0; d < count; ++d) v->push_back(new DevicePool(d));
    return v;
  }();
  if (device < 0 || device >= count)
    fail("cuda:", device, " does not exist: this machine has ", count, " CUDA device",
         count == 1 ? "" : "s", "; pick --devices among cuda:0..cuda:", count - 1);
  return *(*pools)[device];
}

// ---- pinned host memory --------------------------------------------------------------------------
class PinnedPool {
 public:
  void* allocate(size_t bytes, int device) {
    size_t size = round_size(bytes);
    std::lock_guard<std::mutex> lock(m_);
    collect();
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      live_[p] = size;
      cached_ -= size;
      return p;
    }
    void* p = nullptr;
    DeviceGuard guard(device);
    cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      cudaGetLastError();
      fail("cannot allocate ", mib(bytes), " of pinned host memory (", cudaGetErrorString(err),
           "); use fewer loader workers or a smaller batch");
    }
    live_[p] = size;
    return p;
  }

  void release(void* p, Stream last_use, int device) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = live_.find(p);
    if (it == live_.end()) {
      std::fprintf(stderr, "dpx: warning: release of %p, not pinned by dpx (ignored)\n", p);
      return;
    }
    size_t size = it->second;
    live_.erase(it);
    cached_ += size;
    cudaEvent_t e = nullptr;
    if (last_use != nullptr) {
      int previous = -1;
      cudaGetDevice(&previous);  // switched by hand: this runs from destructors, never throws
      bool ok = device >= 0 && cudaSetDevice(device) == cudaSuccess &&
                cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess &&
                cudaEventRecord(e, last_use) == cudaSuccess;
      restore_device(previous);
      if (!ok) {
        cudaGetLastError();
        if (e) cudaEventDestroy(e);
        cached_ -= size;  // retired: reuse could overwrite data a copy still reads
        return;
      }
    }
    pending_.push_back({p, size, e});
  }

  size_t cached() { std::lock_guard<std::mutex> lock(m_); return cached_; }

 private:
  struct Entry { void* p; size_t size; cudaEvent_t done; };

  void collect() {
    for (size_t i = 0; i < pending_.size();) {
      Entry& en = pending_[i];
      if (en.done) {
        cudaError_t q = cudaEventQuery(en.done);
        if (q == cudaErrorNotReady) { ++i; continue; }
        if (q != cudaSuccess) throw_cuda_error(q, "cudaEventQuery (pinned pool)", __FILE__, __LINE__);
        cudaEventDestroy(en.done);
      }
      free_[en.size].push_back(en.p);
      pending_[i] = pending_.back();
      pending_.pop_back();
    }
  }

  std::mutex m_;
  std::map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> live_;
  std::vector<Entry> pending_;
  size_t cached_ = 0;
};

PinnedPool& pinned_pool() {
  static auto* p = new PinnedPool();  // never destroyed, as the device pools
  return *p;
}

// The device whose runtime context performs a copy: the destination's if it is a GPU.
int copy_device(Device dst, Device src) { return dst.is_cuda() ? dst.index : src.index; }

}  // namespace

bool available() { return device_count() > 0; }

int device_count() { return devices().count; }

std::string unavailable_reason() { return devices().reason; }

int compute_capability(int device) {
  const int count = device_count();
  if (device < 0 || device >= count) fail("cuda:", device, " does not exist: this machine has ", count, " CUDA devices");
  int major = 0, minor = 0;
  DPX_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  DPX_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

namespace {
// This thread's AllocationStreamScope: the device it applies to (-1: none) and its stream.
thread_local int t_scope_device = -1;
thread_local Stream t_scope_stream = nullptr;
}  // namespace

AllocationStreamScope::AllocationStreamScope(int device, Stream stream)
    : previous_device_(t_scope_device), previous_stream_(t_scope_stream) {
  t_scope_device = device;
  t_scope_stream = stream;
}

AllocationStreamScope::~AllocationStreamScope() {
  t_scope_device = previous_device_;
  t_scope_stream = previous_stream_;
}

void* allocate(size_t bytes, int device) {
  return allocate(bytes, device, device == t_scope_device ? t_scope_stream : nullptr);
}

void* allocate(size_t bytes, int device, Stream stream) {
  if (bytes == 0) return nullptr;
  // While a step is captured into a CUDA graph, scratch asked for on the step's stream comes from
  // the graph's pool too (core/cuda/graph.hpp): released into the stream's pool, eager work could
  // be given a block that every replay still writes.
  if (capture::active() && device == t_scope_device) stream = t_scope_stream;
  return pool(device).allocate(bytes, stream);
}

void release(void* p, size_t, int device) {
  if (!p) return;
  if (device < 0 || device >= device_count()) return;
  pool(device).release(p);
}

void record_stream(void* p, int device, Stream stream) {
  if (p) pool(device).record_stream(p, stream);
}

void device_memory(int device, size_t* free, size_t* total) {
  DeviceGuard guard(device);
  DPX_CUDA_CHECK(cudaMemGetInfo(free, total));
}

size_t bytes_in_use(int device) { return device_count() > device && device >= 0 ? pool(device).in_use() : 0; }
size_t bytes_cached(int device) { return device_count() > device && device >= 0 ? pool(device).cached() : 0; }
size_t peak_bytes_in_use(int device) { return device_count() > device && device >= 0 ? pool(device).peak() : 0; }
size_t window_peak_bytes(int device) {
  return device_count() > device && device >= 0 ? pool(device).window_peak() : 0;
}
void reset_window_peak(int device) {
  if (device_count() > device && device >= 0) pool(device).reset_window_peak();
}
size_t peak_bytes_reserved(int device) {
  return device_count() > device && device >= 0 ? pool(device).peak_reserved() : 0;
}
void reset_peak_bytes_in_use(int device) {
  if (device_count() > device && device >= 0) pool(device).reset_peak();
}
void empty_cache(int device) {
  if (device_count() > device && device >= 0) pool(device).empty_cache();
}

void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(copy_device(dst_dev, src_dev));
  // cudaMemcpy runs on the legacy default stream, which waits for the work queued on dpx's
  // (blocking) streams: a device-to-host copy sees every kernel queued before it.
  if (dst_dev.is_cuda() && src_dev.is_cuda() && dst_dev.index != src_dev.index) {
    // cudaMemcpyPeer is serialised with the work pending on both devices; cudaMemcpy between
    // GPUs would wait for the current (destination) device's only, and could read the source
    // before the kernels writing it on its own GPU have finished.
    DPX_CUDA_CHECK(cudaMemcpyPeer(dst, dst_dev.index, src, src_dev.index, bytes));
    DPX_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    return;
  }
  DPX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  // Into a device, cudaMemcpy may return before its data has landed (from pageable memory: once
  // it is staged), and a non-blocking stream (the nccl backend's) is not ordered after it: the
  // copy is finished here, so that whatever reads it next on any stream sees it.
  if (dst_dev.is_cuda()) DPX_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

void memset_zero(void* p, size_t bytes, int device) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  // Legacy default stream: ordered after and before the work on dpx's blocking streams.
  DPX_CUDA_CHECK(cudaMemset(p, 0, bytes));
}

void* allocate_pinned(size_t bytes, int device) {
  if (bytes == 0) return nullptr;
  return pinned_pool().allocate(bytes, device);
}

void release_pinned(void* p, size_t) {
  if (p) pinned_pool().release(p, nullptr, -1);
}

void release_pinned(void* p, size_t, Stream last_use, int device) {
  if (p) pinned_pool().release(p, last_use, device);
}

size_t pinned_bytes_cached() { return pinned_pool().cached(); }

void copy_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes,
                Stream stream) {
  if (bytes == 0) return;
  DeviceGuard guard(copy_device(dst_dev, src_dev));
  DPX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

void copy_peer_async(void* dst, int dst_device, Stream dst_stream, const void* src, int src_device, Stream src_stream,
                     size_t bytes) {
  if (bytes == 0) return;
  if (src_stream != dst_stream || src_device != dst_device) {  // two devices' legacy streams are two streams
    cudaEvent_t ready = nullptr;
    {
      DeviceGuard guard(src_device);
      DPX_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
      DPX_CUDA_CHECK(cudaEventRecord(ready, src_stream));
    }
    DeviceGuard guard(dst_device);
    const cudaError_t err = cudaStreamWaitEvent(dst_stream, ready, 0);
    cudaEventDestroy(ready);  // released once the wait has been satisfied
    DPX_CUDA_CHECK(err);
  }
  DeviceGuard guard(dst_device);
  if (dst_device == src_device)
    DPX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dst_stream));
  else
    DPX_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, dst_stream));
}

void retain_pool(int device, Stream key) { pool(device).retain(key); }
void release_pool(int device, Stream key) { pool(device).unretain(key); }

void synchronize(Stream stream, int device) {
  capture::not_capturable("waiting for the stream (cudaStreamSynchronize)");
  DeviceGuard guard(device);
  DPX_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace dpx::cuda
