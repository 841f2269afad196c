// Tensor (see tensor.hpp): allocation from the host block cache or a device pool, views, copies
// between devices, and the checks that name what was wrong.
#include "core/tensor.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "core/capture.hpp"
#include "core/cuda/memory.hpp"
#include "core/host_cache.hpp"

namespace dpx {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ")";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) fail("negative dimension in shape ", shape_str(s));
    n *= d;
  }
  return n;
}

Storage::~Storage() {
  if (data && release) release(data, bytes, device);
}

namespace {
std::atomic<size_t> g_host_bytes{0};  // a statistic only: no computation reads it

// The host block cache's cap (core/host_cache.hpp), DPX_HOST_CACHE_MB's default. Under
// AddressSanitizer 0, the cache off, unless the variable is set: a block reused at once would
// hide a use after free from it. Otherwise half the machine's memory, at least 4 GiB: a training
// step frees and asks again for the same sizes, and a cache smaller than the step's working set
// sends its largest blocks back to the system each step (VGG-16 at 224x224, batch 8: with 4 GiB
// of free lists by size it trained at 3.0 img/s instead of 4.2, every fresh block's pages faulted
// in again).
size_t default_cap_bytes() {
#if defined(__SANITIZE_ADDRESS__) || defined(DPX_SANITIZE)
  return 0;
#else
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const size_t half = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 2 : 0;
  return std::max<size_t>(size_t{4096} << 20, half);
#endif
}
// A high-water mark: raises `peak` to `value` if it is below (any thread).
void raise_to(std::atomic<size_t>& peak, size_t value) {
  size_t seen = peak.load(std::memory_order_relaxed);
  while (seen < value && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

std::atomic<size_t> g_host_peak{0}, g_host_window_peak{0};

// DPX_HOST_CACHE_MB, or the default.
size_t cap_from_env() {
  const char* text = std::getenv("DPX_HOST_CACHE_MB");
  if (!text || !*text) return default_cap_bytes();
  char* end = nullptr;
  errno = 0;
  const unsigned long long mb = std::strtoull(text, &end, 10);
  if (*end != '\0' || errno == ERANGE || !std::isdigit(static_cast<unsigned char>(text[0])) || mb > (1ull << 30))
    fail("DPX_HOST_CACHE_MB='", text,
         "' is not a size in MiB: unset it for the default (half the machine's memory, at least 4096), pass a "
         "whole number such as 1024, or 0 to give every freed host block back to the system at once");
  return static_cast<size_t>(mb) << 20;
}

detail::HostCache& host_cache() {
  // Never destroyed: tensors may be freed while the process exits.
  static detail::HostCache* cache = new detail::HostCache(cap_from_env());
  return *cache;
}

void host_release(void* p, size_t bytes, Device) {
  g_host_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  host_cache().give(p, bytes);
}
void cuda_release(void* p, size_t bytes, Device d) { cuda::release(p, bytes, d.index); }
}  // namespace

std::shared_ptr<Storage> allocate_storage(size_t bytes, Device device) {
  auto s = std::make_shared<Storage>();
  s->bytes = bytes;
  s->device = device;
  if (device.is_cpu()) {
    s->data = host_cache().take(bytes);
    if (!s->data)
      fail("out of host memory allocating ", bytes, " bytes: lower --batch-size, --image-size, --workers or the "
           "number of ranks, pick a smaller model, or free memory on this machine");
    s->release = host_release;
    const size_t live = g_host_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    raise_to(g_host_peak, live);
    raise_to(g_host_window_peak, live);
  } else {
    s->data = cuda::allocate(bytes, device.index);
    s->release = cuda_release;
  }
  return s;
}

size_t host_bytes_cached() { return host_cache().cached_bytes(); }
uint64_t host_system_allocations() { return host_cache().system_allocations(); }
void empty_host_cache() { host_cache().empty(); }
size_t host_cache_cap_bytes() { return host_cache().cap_bytes(); }
void set_host_reserve_limit(size_t bytes) { host_cache().set_reserve_limit(bytes); }
size_t host_reserve_limit() { return host_cache().reserve_limit(); }
size_t host_bytes_released_for_limit() { return host_cache().limit_released_bytes(); }

size_t host_bytes_in_use() { return g_host_bytes.load(std::memory_order_relaxed); }
size_t host_peak_bytes_in_use() { return g_host_peak.load(std::memory_order_relaxed); }
size_t host_bytes_reserved() { return host_cache().reserved_bytes(); }
size_t host_peak_bytes_reserved() { return host_cache().peak_reserved_bytes(); }
void MemoryPeaks::raise_to(const MemoryPeaks& o) {
  host_allocated = std::max(host_allocated, o.host_allocated);
  host_reserved = std::max(host_reserved, o.host_reserved);
  device_allocated = std::max(device_allocated, o.device_allocated);
  device_reserved = std::max(device_reserved, o.device_reserved);
}

MemoryPeaks memory_peaks(Device device) {
  MemoryPeaks m{host_peak_bytes_in_use(), host_peak_bytes_reserved(), 0, 0};
  if (device.is_cuda()) {
    m.device_allocated = cuda::peak_bytes_in_use(device.index);
    m.device_reserved = cuda::peak_bytes_reserved(device.index);
  }
  return m;
}

void reset_memory_peaks() {
  empty_host_cache();
  g_host_peak.store(host_bytes_in_use(), std::memory_order_relaxed);
  host_cache().reset_peak();
  for (int d = 0; d < cuda::device_count(); ++d) {
    cuda::empty_cache(d);
    cuda::reset_peak_bytes_in_use(d);
  }
}

size_t window_peak_bytes(Device device) {
  return device.is_cuda() ? cuda::window_peak_bytes(device.index) : g_host_window_peak.load(std::memory_order_relaxed);
}

void reset_window_peaks() {
  g_host_window_peak.store(host_bytes_in_use(), std::memory_order_relaxed);
  for (int d = 0; d < cuda::device_count(); ++d) cuda::reset_window_peak(d);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = allocate_storage(t.nbytes(), device);
  return t;
}

Tensor Tensor::on_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  DPX_CHECK(storage && storage->bytes >= t.nbytes(), "Tensor::on_storage: ", storage ? storage->bytes : 0,
            " bytes of storage for ", shape_str(shape));
  t.storage_ = std::move(storage);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  capture::not_capturable("Tensor::zeros clears its memory outside the step's stream (a GPU layer makes zeros "
                          "with ops::fill on its context)");
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu())
    std::memset(t.raw(), 0, t.nbytes());
  else
    cuda::memset_zero(t.raw(), t.nbytes(), device.index);
  return t;
}

Tensor Tensor::from(const Shape& shape, std::initializer_list<float> values) {
  return from(shape, std::vector<float>(values));
}

Tensor Tensor::from(const Shape& shape, const std::vector<float>& values) {
  Tensor t = empty(shape);
  DPX_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "Tensor::from: ", values.size(),
            " values for shape ", shape_str(shape));
  std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

int64_t Tensor::size(int d) const {
  int n = dim();
  if (d < 0) d += n;
  DPX_CHECK(d >= 0 && d < n, "dimension ", d, " out of range for shape ", shape_str(shape_));
  return shape_[d];
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  DPX_CHECK(dim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ",
            end, ") out of range for shape ", shape_str(shape_));
  Tensor t = *this;
  int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  t.shape_[0] = end - begin;
  t.numel_ = row * (end - begin);
  t.offset_bytes_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::view(Shape shape) const {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DPX_CHECK(infer < 0, "view: only one dimension may be -1 in ", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    DPX_CHECK(known > 0 && numel_ % known == 0, "view: cannot infer ", shape_str(shape), " from ",
              shape_str(shape_));
    shape[infer] = numel_ / known;
  }
  DPX_CHECK(shape_numel(shape) == numel_, "view: shape ", shape_str(shape), " does not hold ",
            numel_, " elements of ", shape_str(shape_));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::view_at(int64_t offset, const Shape& shape) const {
  int64_t n = shape_numel(shape);
  DPX_CHECK(offset >= 0 && offset + n <= numel_, "view_at: [", offset, ", ", offset + n,
            ") outside ", numel_, " elements");
  Tensor t = *this;
  t.shape_ = shape;
  t.numel_ = n;
  t.offset_bytes_ += static_cast<size_t>(offset) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  DPX_CHECK(src.numel() == numel_ && src.dtype() == dtype_, "copy_from: ", shape_str(src.shape()),
            " ", dtype_name(src.dtype()), " into ", shape_str(shape_), " ", dtype_name(dtype_));
  if (nbytes() == 0 || (src.raw() == raw() && src.device() == device())) return;
  if (device().is_cpu() && src.device().is_cpu()) {
    std::memmove(raw(), src.raw(), nbytes());
  } else {
    capture::not_capturable("a copy between host and device (Tensor::to or copy_from) waits for the device");
    cuda::copy(raw(), device(), src.raw(), src.device(), nbytes());
  }
}

namespace {
float load_as_float(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<float>(static_cast<const double*>(p)[i]);
    case DType::f16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::i32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case DType::i64: return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    case DType::u8: return static_cast<float>(static_cast<const uint8_t*>(p)[i]);
  }
  return 0;
}
void store_float(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = v; break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_half(v); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(v); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
  }
}
}  // namespace

Tensor Tensor::cast(DType dtype) const {
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  Tensor out = empty(shape_, dtype);
  if (dtype == DType::f64 && dtype_ == DType::f64) {
    out.copy_from(host);
  } else if (dtype == DType::i64 && dtype_ == DType::i64) {
    out.copy_from(host);
  } else if (dtype == DType::f64) {
    for (int64_t i = 0; i < numel_; ++i)
      out.data<double>()[i] = dtype_ == DType::i64 ? static_cast<double>(host.data<int64_t>()[i])
                                                   : load_as_float(host.raw(), dtype_, i);
  } else if (dtype_ == DType::f64 && dtype == DType::i64) {
    for (int64_t i = 0; i < numel_; ++i) out.data<int64_t>()[i] = static_cast<int64_t>(host.data<double>()[i]);
  } else {
    for (int64_t i = 0; i < numel_; ++i) store_float(out.raw(), dtype, i, load_as_float(host.raw(), dtype_, i));
  }
  return device().is_cpu() ? out : out.to(device());
}

std::vector<float> Tensor::to_vector() const {
  capture::not_capturable("to_vector() reads a tensor on the host");
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  std::vector<float> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[i] = load_as_float(host.raw(), dtype_, i);
  return v;
}

float Tensor::item() const {
  DPX_CHECK(numel_ == 1, "item() on a tensor of ", numel_, " elements");
  capture::not_capturable("item() reads a value on the host");
  return to_vector()[0];
}

}  // namespace dpx
