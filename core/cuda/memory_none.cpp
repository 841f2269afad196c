// CUDA memory entry points for a build without CUDA: each says so and what to do.
// Queries (available, device_count, the byte counters) answer "nothing" instead of throwing.
#include "core/cuda/memory.hpp"
#include "core/error.hpp"

namespace dpx::cuda {

namespace {
[[noreturn]] void no_cuda() {
  fail("this dpx was built without CUDA: rebuild with -DDPX_CUDA=ON on a machine with the CUDA "
       "toolkit, cuDNN and NCCL, or use --devices cpu");
}
}  // namespace

bool available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "this dpx was built without CUDA (rebuild with -DDPX_CUDA=ON)"; }
int compute_capability(int) { no_cuda(); }
void* allocate(size_t, int) { no_cuda(); }
void release(void*, size_t, int) {}
void copy(void*, Device, const void*, Device, size_t) { no_cuda(); }
void memset_zero(void*, size_t, int) { no_cuda(); }
size_t bytes_in_use(int) { return 0; }
size_t bytes_cached(int) { return 0; }
void empty_cache(int) {}

AllocationStreamScope::AllocationStreamScope(int, Stream) : previous_device_(-1), previous_stream_(nullptr) {}
AllocationStreamScope::~AllocationStreamScope() = default;
void* allocate(size_t, int, Stream) { no_cuda(); }
void record_stream(void*, int, Stream) { no_cuda(); }
size_t peak_bytes_in_use(int) { return 0; }
void device_memory(int, size_t*, size_t*) { no_cuda(); }
size_t peak_bytes_reserved(int) { return 0; }
size_t window_peak_bytes(int) { return 0; }
void reset_window_peak(int) {}
void reset_peak_bytes_in_use(int) {}
void* allocate_pinned(size_t, int) { no_cuda(); }
void release_pinned(void*, size_t) {}
void release_pinned(void*, size_t, Stream, int) {}
size_t pinned_bytes_cached() { return 0; }
void copy_async(void*, Device, const void*, Device, size_t, Stream) { no_cuda(); }
void copy_peer_async(void*, int, Stream, const void*, int, Stream, size_t) { no_cuda(); }
void synchronize(Stream, int) { no_cuda(); }
Stream stream_of(const Context&) { return nullptr; }
void retain_pool(int, Stream) { no_cuda(); }
void release_pool(int, Stream) {}

}  // namespace dpx::cuda
