// The p2p backend (parallel/comm/p2p/p2p_backend.hpp): thread ranks (thread_ranks.hpp) whose exchanges
// move GPU memory. The sender records an event on its stream after the work that wrote the send
// buffer and posts the pointer; the receiver makes its own stream wait for that event, then
// copies (cudaMemcpyPeerAsync, or a device-to-device copy on one GPU) or reduces straight out
// of the sender's buffer (peer access, or one GPU), or stages it through its own memory first
// where the GPUs have no peer access. It synchronises its stream before it lets the sender go,
// so each exchange is complete when it returns, as in the threads backend.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "core/cuda/check.hpp"
#include "core/cuda/context.hpp"
#include "core/cuda/device_guard.hpp"
#include "core/cuda/memory.hpp"
#include "core/error.hpp"
#include "parallel/comm/p2p/cuda/p2p_reduce.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"
#include "parallel/comm/threads/thread_ranks.hpp"

namespace dpx::parallel {

namespace {

// Which GPU may read which other's memory directly: can_read[reader][owner].
struct PeerMap {
  std::vector<std::vector<char>> can_read;
  bool direct(int reader, int owner) const {
    return reader == owner || can_read[static_cast<size_t>(reader)][static_cast<size_t>(owner)] != 0;
  }
};

// Enables peer access between every pair of the ranks' GPUs that supports it (once per pair and
// process: a second enable reports "already enabled", which is fine).
PeerMap map_peer_access(const std::vector<int>& devices) {
  const int n = cuda::device_count();
  PeerMap map{std::vector<std::vector<char>>(static_cast<size_t>(n), std::vector<char>(static_cast<size_t>(n), 0))};
  std::vector<char> used(static_cast<size_t>(n), 0);
  for (int d : devices) used[static_cast<size_t>(d)] = 1;
  for (int reader = 0; reader < n; ++reader) {
    if (!used[static_cast<size_t>(reader)]) continue;
    for (int owner = 0; owner < n; ++owner) {
      if (owner == reader || !used[static_cast<size_t>(owner)]) continue;
      int can = 0;
      DPX_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, reader, owner));
      if (!can) continue;
      cuda::DeviceGuard guard(reader);
      const cudaError_t err = cudaDeviceEnablePeerAccess(owner, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();  // clears it
      else DPX_CUDA_CHECK(err);
      map.can_read[static_cast<size_t>(reader)][static_cast<size_t>(owner)] = 1;
    }
  }
  return map;
}

// Device memory that grows on demand, from the caching allocator's pool of one stream.
class DeviceBuffer {
 public:
  DeviceBuffer(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~DeviceBuffer() { cuda::release(p_, bytes_, device_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::byte* get(size_t bytes) {
    if (bytes > bytes_) {
      cuda::release(p_, bytes_, device_);
      p_ = nullptr;
      p_ = cuda::allocate(bytes, device_, stream_);
      bytes_ = bytes;
    }
    return static_cast<std::byte*>(p_);
  }

 private:
  int device_;
  cudaStream_t stream_;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class P2PTransport final : public ThreadRankTransport {
 public:
  P2PTransport(ThreadWorld& world, int rank, const std::vector<int>& devices, const PeerMap& peers)
      : ThreadRankTransport(world, rank), devices_(devices), peers_(peers), device_(devices[static_cast<size_t>(rank)]) {
    cuda::DeviceGuard guard(device_);
    // Blocking (not cudaStreamNonBlocking): work the caller queued on the legacy default stream
    // (cuda::copy, cuda::memset_zero) is ordered before every collective (p2p_backend.hpp).
    DPX_CUDA_CHECK(cudaStreamCreate(&stream_));
    DPX_CUDA_CHECK(cudaEventCreateWithFlags(&sent_, cudaEventDisableTiming));
    for (auto& s : scratch_) s = std::make_unique<DeviceBuffer>(device_, stream_);
    staging_ = std::make_unique<DeviceBuffer>(device_, stream_);
  }
  ~P2PTransport() override {
    cuda::DeviceGuard guard(device_);
    cudaStreamSynchronize(stream_);
    for (auto& s : scratch_) s.reset();
    staging_.reset();
    cudaEventDestroy(sent_);
    cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "p2p"; }
  bool accepts(Device device) const override { return device == Device::cuda(device_); }

  void copy_local(void* dst, const void* src, size_t bytes) override {
    if (dst == src || bytes == 0) return;
    cuda::DeviceGuard guard(device_);
    DPX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void average_local(void* data, size_t count, DType dtype, int ranks) override {
    cuda::DeviceGuard guard(device_);
    cuda_p2p::finish_average(data, count, dtype, ranks, stream_);
  }
  std::byte* scratch(size_t bytes, int slot) override {
    DPX_CHECK(slot == 0 || slot == 1, "p2p: scratch slot ", slot, " (0 or 1)");
    return scratch_[slot]->get(bytes);
  }

  void begin_call(const CommCall& call) override {
    if (!pending_error_.empty()) {
      std::string e = std::move(pending_error_);
      pending_error_.clear();
      fail("p2p rank ", rank(), " on cuda:", device_, ": the previous collective failed on the GPU: ", e);
    }
    ThreadRankTransport::begin_call(call);
  }
  // A collective is blocking: its last local copies and divisions are done when it returns. An
  // error found here cannot be thrown (the communicator calls this while unwinding too); the
  // rank's next call reports it.
  void end_call() override {
    cuda::DeviceGuard guard(device_);
    const cudaError_t err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess && pending_error_.empty()) pending_error_ = cudaGetErrorString(err);
    ThreadRankTransport::end_call();
  }

 protected:
  const void* before_send(const Exchange& x) override {
    if (x.send_bytes == 0) return nullptr;
    cuda::DeviceGuard guard(device_);
    DPX_CUDA_CHECK(cudaEventRecord(sent_, stream_));
    return sent_;
  }

  void deliver(const Exchange& x, const void* incoming, const void* token) override {
    if (x.recv_bytes == 0) return;
    cuda::DeviceGuard guard(device_);
    const int owner = devices_[static_cast<size_t>(x.recv_peer)];
    // The sender's writes to its buffer (on its own stream, maybe on another GPU) come first.
    if (token) DPX_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(const_cast<void*>(token)), 0));
    try {
      if (!x.reduce_with) {
        if (owner == device_)
          DPX_CUDA_CHECK(cudaMemcpyAsync(x.recv, incoming, x.recv_bytes, cudaMemcpyDeviceToDevice, stream_));
        else
          DPX_CUDA_CHECK(cudaMemcpyPeerAsync(x.recv, device_, incoming, owner, x.recv_bytes, stream_));
      } else {
        const void* theirs = incoming;
        if (!peers_.direct(device_, owner)) {  // no peer access: bring the bytes here first
          std::byte* stage = staging_->get(x.recv_bytes);
          DPX_CUDA_CHECK(cudaMemcpyPeerAsync(stage, device_, incoming, owner, x.recv_bytes, stream_));
          theirs = stage;
        }
        cuda_p2p::reduce_into(x.recv, x.reduce_with, theirs, x.recv_bytes / dtype_size(x.dtype), x.dtype, x.op,
                              stream_);
      }
      // The sender may reuse its buffer once this returns.
      DPX_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } catch (...) {
      cudaStreamSynchronize(stream_);  // nothing may still read the sender's buffer when it leaves
      throw;
    }
  }

 private:
  const std::vector<int>& devices_;
  const PeerMap& peers_;
  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t sent_ = nullptr;
  std::unique_ptr<DeviceBuffer> scratch_[2];
  std::unique_ptr<DeviceBuffer> staging_;
  std::string pending_error_;
};

}  // namespace

std::unique_ptr<cuda::AllocationStreamScope> replica_allocation_scope(const Context& ctx) {
  if (!ctx.device.is_cuda()) return nullptr;
  return std::make_unique<cuda::AllocationStreamScope>(ctx.device.index, cuda::state_of(ctx).stream);
}

void run_p2p_ranks(const std::vector<int>& devices,
                   const std::function<void(Communicator& host, Communicator& p2p, int device)>& fn,
                   const RankOptions& options) {
  if (devices.empty()) usage_fail("--backend p2p: no ranks to run");
  if (const std::string why = p2p_unavailable_reason(); !why.empty()) usage_fail("--backend p2p: ", why);
  const int visible = cuda::device_count();
  for (int d : devices)
    if (d < 0 || d >= visible) usage_fail("--backend p2p: GPU ", d, " does not exist (this machine shows ", visible, ")");
  const PeerMap peers = map_peer_access(devices);
  run_thread_ranks(
      static_cast<int>(devices.size()),
      [&](Communicator& host, Communicator& p2p) {
        const int device = devices[static_cast<size_t>(p2p.rank())];
        DPX_CUDA_CHECK(cudaSetDevice(device));  // the rank's thread works on its GPU
        fn(host, p2p, device);
      },
      options,
      [&](ThreadWorld& world, int rank) -> std::unique_ptr<ThreadRankTransport> {
        return std::make_unique<P2PTransport>(world, rank, devices, peers);
      },
      "p2p");
}

}  // namespace dpx::parallel
