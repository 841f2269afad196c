// A rank on one GPU: its CudaState (stream, handles), synchronous host-to-device copies of each
// batch (ordered with the stream, which is blocking), and CUDA events at the phase boundaries.
#include <array>
#include <vector>

#include "core/cuda/check.hpp"
#include "core/cuda/context.hpp"
#include "core/cuda/event.hpp"
#include "core/cuda/memory.hpp"
#include "parallel/device_env.hpp"

namespace dpx::parallel {

namespace {

class CudaEnv final : public DeviceEnv {
 public:
  CudaEnv(int device, bool allow_tf32) : state_(cuda::make_cuda_state(device)) {
    ctx_ = cuda::make_cuda_context(*state_, allow_tf32);
    for (int i = 0; i < kBoundaries; ++i) events_.emplace_back(device);
  }

  Tensor upload(const Tensor& host) override { return host.to(ctx_.device); }

  void mark(Boundary b) override {
    int i = static_cast<int>(b);
    events_[i].record(state_->stream);
    marked_[i] = true;
  }

  void finish_step(StepTimes& t) override {
    auto span_s = [&](Boundary a, Boundary b) {
      int i = static_cast<int>(a), j = static_cast<int>(b);
      return marked_[i] && marked_[j] ? cuda::elapsed_ms(events_[i], events_[j]) * 1e-3 : 0.0;
    };
    int last = static_cast<int>(marked_[static_cast<int>(Boundary::optimizer_end)] ? Boundary::optimizer_end
                                                                                   : Boundary::backward_end);
    events_[last].synchronize();
    t[Phase::h2d] = span_s(Boundary::h2d_begin, Boundary::forward_begin);
    t[Phase::forward] = span_s(Boundary::forward_begin, Boundary::backward_begin);
    t[Phase::backward] = span_s(Boundary::backward_begin, Boundary::backward_end);
    t[Phase::optimizer] = span_s(Boundary::optimizer_begin, Boundary::optimizer_end);
    marked_.fill(false);
  }

 private:
  static constexpr int kBoundaries = 6;
  std::unique_ptr<cuda::CudaState> state_;
  std::vector<cuda::Event> events_;
  std::array<bool, kBoundaries> marked_{};
};

}  // namespace

std::unique_ptr<DeviceEnv> make_cuda_env(int device, bool allow_tf32) {
  if (!cuda::available())
    fail("--devices cuda:", device, ": no usable CUDA device on this machine (driver missing or no GPU)");
  if (device >= cuda::device_count())
    fail("--devices cuda:", device, ": this machine has ", cuda::device_count(), " CUDA device(s)");
  return std::make_unique<CudaEnv>(device, allow_tf32);
}

}  // namespace dpx::parallel
