// Batches delivered on a GPU: the loader's workers copy each pinned host batch into a device
// buffer of a small ring on a copy stream of their own, so the copy overlaps the step before it.
// A buffer is reused only after the consumer's stream has passed the work that read it: when the
// consumer asks for a batch, every buffer nobody holds any more gets an event on its stream, and
// the next copy into that buffer waits for it on the GPU. The bookkeeping here is CUDA-free and
// tested on the CPU with a host CopyEngine (tests/core/test_device_batches.cpp); the CUDA engine
// is make_cuda_copy_engine.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/device.hpp"
#include "core/tensor.hpp"

namespace dpx::data {

// What moves the bytes and orders the GPU's work.
class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  // A buffer on the device the batches go to.
  virtual Tensor allocate(const Shape& shape, DType dtype) = 0;
  // On the consumer's stream: everything queued there so far is the last work that may read
  // ring slot `slot`. Called from any thread.
  virtual void record_release(int slot) = 0;
  // On the calling thread's own copy stream: waits (on the GPU) for slot `slot`'s last release,
  // copies `src` (pinned host memory) into `dst`, and blocks the calling thread until it is done.
  virtual void copy(int slot, Tensor& dst, const Tensor& src) = 0;
};

// The CUDA engine for `device` (cuda:N), whose consumer works on `stream`. Throws without CUDA.
std::unique_ptr<CopyEngine> make_cuda_copy_engine(Device device, cuda::Stream stream);

class DeviceBatches {
 public:
  DeviceBatches(std::shared_ptr<CopyEngine> engine, int slots);
  // Worker side: `images` and `labels` (host; pinned for the copy to be asynchronous) copied into a
  // free slot, waiting for one; the results are views of the slot's buffers, valid while held.
  // Throws (dpx::Error) when stop() was called while waiting.
  std::pair<Tensor, Tensor> upload(const Tensor& images, const Tensor& labels);
  // Consumer side, before it waits for its next batch: slots whose buffers nobody holds any more
  // are released on the consumer's stream and become free.
  void reclaim();
  // Wakes and fails every upload waiting for a slot (the loader is being destroyed or restarted).
  void stop();
  int slots() const { return static_cast<int>(slots_.size()); }
  int free_slots();

 private:
  enum class State { free, filling, handed };  // filling: a worker's alone; handed: views are out
  struct Slot {
    Tensor images, labels;  // the device buffers (grown when a batch needs more)
    State state = State::free;
  };
  std::shared_ptr<CopyEngine> engine_;
  std::mutex mu_;
  std::condition_variable free_cv_;
  std::vector<Slot> slots_;
  bool stopped_ = false;
};

}  // namespace dpx::data
