// The device-batch ring (device_batches.hpp) and its CUDA copy engine: an event per slot on the
// consumer's stream, a non-blocking copy stream per worker thread.
#include "core/data/device_batches.hpp"

#include <map>
#include <shared_mutex>
#include <thread>

#include "core/capture.hpp"
#include "core/error.hpp"

#ifdef DPX_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/check.hpp"
#include "core/cuda/device_guard.hpp"
#include "core/cuda/graph.hpp"
#endif

namespace dpx::data {

DeviceBatches::DeviceBatches(std::shared_ptr<CopyEngine> engine, int slots)
    : engine_(std::move(engine)), slots_(static_cast<size_t>(slots)) {
  DPX_CHECK(engine_ != nullptr && slots >= 1, "DeviceBatches: ", slots, " slots");
}

std::pair<Tensor, Tensor> DeviceBatches::upload(const Tensor& images, const Tensor& labels) {
  int k = -1;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (stopped_) fail("the data loader stopped while a batch waited for a device buffer");
      for (size_t i = 0; i < slots_.size() && k < 0; ++i)
        if (slots_[i].state == State::free) k = static_cast<int>(i);
      if (k >= 0) break;
      free_cv_.wait(lock);
    }
    slots_[static_cast<size_t>(k)].state = State::filling;
  }
  Slot& s = slots_[static_cast<size_t>(k)];  // this worker's alone until handed over
  auto fit = [&](Tensor& buffer, const Tensor& like) {
    if (!buffer.defined() || buffer.numel() < like.numel() || buffer.dtype() != like.dtype()) {
      buffer = engine_->allocate(like.shape(), like.dtype());
      // A fresh block may be one the consumer's queued work still reads: copy after that work.
      engine_->record_release(k);
    }
    return buffer.view_at(0, like.shape());
  };
  std::pair<Tensor, Tensor> out;
  try {
    out.first = fit(s.images, images);
    out.second = fit(s.labels, labels);
    engine_->copy(k, out.first, images);
    engine_->copy(k, out.second, labels);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    s.state = State::free;  // nothing of it was handed out
    free_cv_.notify_one();
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.state = State::handed;
  return out;
}

void DeviceBatches::reclaim() {
  std::lock_guard<std::mutex> lock(mu_);
  bool freed = false;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    // Handed out and let go of: its only owner is the ring.
    if (s.state != State::handed) continue;
    if (s.images.storage().use_count() != 1 || s.labels.storage().use_count() != 1) continue;
    engine_->record_release(static_cast<int>(i));
    s.state = State::free;
    freed = true;
  }
  if (freed) free_cv_.notify_all();
}

void DeviceBatches::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  free_cv_.notify_all();
}

int DeviceBatches::free_slots() {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const Slot& s : slots_) n += s.state == State::free;
  return n;
}

#ifdef DPX_WITH_CUDA

namespace {

class CudaCopyEngine final : public CopyEngine {
 public:
  CudaCopyEngine(Device device, cuda::Stream consumer) : device_(device), consumer_(consumer) {}
  ~CudaCopyEngine() override {  // no throwing here: errors of teardown are ignored
    int previous = -1;
    cudaGetDevice(&previous);
    cudaSetDevice(device_.index);
    for (auto& [thread, stream] : streams_) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    for (auto& [slot, event] : events_) cudaEventDestroy(event);
    cuda::restore_device(previous);
  }

  Tensor allocate(const Shape& shape, DType dtype) override { return Tensor::empty(shape, dtype, device_); }

  void record_release(int slot) override {
    // A worker's record waits while a --cuda-graph capture records the consumer's stream (it
    // would join the graph); the capturing thread itself must not get here.
    DPX_CHECK(!capture::active(), "a device batch buffer was released inside a CUDA graph capture");
    std::shared_lock<std::shared_mutex> gate(cuda::capture_gate(device_.index));
    cuda::DeviceGuard guard(device_.index);
    DPX_CUDA_CHECK(cudaEventRecord(event(slot), consumer_));
  }

  void copy(int slot, Tensor& dst, const Tensor& src) override {
    DPX_CHECK(dst.nbytes() == src.nbytes() && dst.device() == device_ && src.device().is_cpu(),
              "device batch copy: ", src.nbytes(), " host bytes into ", dst.nbytes(), " on ", dst.device().str());
    cuda::DeviceGuard guard(device_.index);
    cudaStream_t s = stream();
    DPX_CUDA_CHECK(cudaStreamWaitEvent(s, event(slot), 0));
    DPX_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyHostToDevice, s));
    DPX_CUDA_CHECK(cudaStreamSynchronize(s));
  }

 private:
  // The calling thread's copy stream: non-blocking, so it waits for nothing of the legacy
  // default stream and the copies run beside the consumer's kernels.
  cudaStream_t stream() {
    std::lock_guard<std::mutex> lock(mu_);
    cudaStream_t& s = streams_[std::this_thread::get_id()];
    if (!s) DPX_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  cudaEvent_t event(int slot) {
    std::lock_guard<std::mutex> lock(mu_);
    cudaEvent_t& e = events_[slot];
    if (!e) DPX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  Device device_;
  cudaStream_t consumer_;
  std::mutex mu_;
  std::map<std::thread::id, cudaStream_t> streams_;
  std::map<int, cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<CopyEngine> make_cuda_copy_engine(Device device, cuda::Stream stream) {
  DPX_CHECK(device.is_cuda(), "make_cuda_copy_engine: ", device.str(), " is not a GPU");
  return std::make_unique<CudaCopyEngine>(device, stream);
}

#else

std::unique_ptr<CopyEngine> make_cuda_copy_engine(Device device, cuda::Stream) {
  fail("--devices ", device.str(), ": this dpx was built without CUDA: rebuild with -DDPX_CUDA=ON, or use --devices cpu");
}

#endif

}  // namespace dpx::data
