// The GradFence of a rank on a GPU (reducer.hpp): a CUDA event per bucket, recorded on the rank's
// compute stream once the bucket's gradients (and their narrowing) are queued there. A bucket's
// all-reduce waits for it on the communicator's stream where the calls are queued there (nccl),
// else on the communication thread, whose calls then run on the rank's GPU (p2p). In a recorded
// step (--cuda-graph, nccl) a second event per bucket joins the communicator's stream back into
// the compute stream after the all-reduce: the fork and the join of the graph's two branches.
#include <memory>
#include <vector>

#include "core/cuda/check.hpp"
#include "core/cuda/context.hpp"
#include "core/cuda/event.hpp"
#include "parallel/train/reducer.hpp"

namespace dpx::parallel {

namespace {

class CudaGradFence final : public GradFence {
 public:
  CudaGradFence(int device, cudaStream_t compute, cudaStream_t calls)
      : device_(device), compute_(compute), calls_(calls) {}
  void resize(size_t buckets) override {
    events_.clear();
    joins_.clear();
    for (size_t i = 0; i < buckets; ++i) {
      events_.emplace_back(device_, false);
      joins_.emplace_back(device_, false);
    }
  }
  void mark(size_t bucket, const Tensor&) override { events_.at(bucket).record_order(compute_); }
  bool join(size_t bucket) override {
    if (!calls_) return false;  // p2p: a host thread runs the calls
    joins_.at(bucket).record_order(calls_);
    joins_.at(bucket).wait_on(compute_);
    return true;
  }
  void wait(size_t bucket) override {
    if (calls_) return events_.at(bucket).wait_on(calls_);  // the GPU waits, not the host
    DPX_CUDA_CHECK(cudaSetDevice(device_));  // the communication thread's copies and kernels run there
    events_.at(bucket).synchronize();
  }

 private:
  int device_;
  cudaStream_t compute_, calls_;
  std::vector<cuda::Event> events_, joins_;
};

}  // namespace

std::unique_ptr<GradFence> make_cuda_grad_fence(const Context& ctx, cuda::Stream call_stream) {
  const cuda::CudaState& st = cuda::state_of(ctx);
  return std::make_unique<CudaGradFence>(st.device, st.stream, call_stream);
}

}  // namespace dpx::parallel
