// A rank on one GPU: its CudaState (stream, handles), the batches the data loader copied to the
// device ahead of each step (a synchronous copy of anything still on the host), and CUDA events at the begin and end of
// each device-timed phase (PhaseScope marks them), DDP's exposed communication among them.
#include <array>
#include <vector>

#include "core/cuda/check.hpp"
#include "core/cuda/context.hpp"
#include "core/cuda/device_guard.hpp"
#include "core/cuda/event.hpp"
#include "core/cuda/memory.hpp"
#include "parallel/train/device_env.hpp"

namespace dpx::parallel {

std::unique_ptr<StepRecorder> make_graph_recorder(int device, cuda::Stream stream);  // graph_recorder.cpp

namespace {

class CudaEnv final : public DeviceEnv {
 public:
  explicit CudaEnv(int device) : state_(cuda::make_cuda_state(device)) {
    ctx_ = cuda::make_cuda_context(*state_);
    for (int i = 0; i < kEvents; ++i) events_.emplace_back(device);
  }

  // The loader's batches are on the device already (copied ahead of the step by its feeder).
  Tensor upload(const Tensor& host) override { return host.device() == ctx_.device ? host : host.to(ctx_.device); }

  void mark(Phase p, Edge e) override {
    const int i = event_of(p, e);
    if (i < 0) return;  // a phase the host times
    events_[i].record(state_->stream);
    marked_[i] = true;
  }

  void replayed(Phase p) override {
    const int i = event_of(p, Edge::begin);
    if (i < 0) return;
    marked_[i] = marked_[i + 1] = true;
  }

  std::unique_ptr<StepRecorder> make_recorder() override { return make_graph_recorder(state_->device, state_->stream); }

  void synchronize() override { cuda::synchronize(state_->stream, state_->device); }

  void finish_step(StepTimes& t) override {
    auto span_s = [&](Phase p) {
      const int i = event_of(p, Edge::begin), j = event_of(p, Edge::end);
      return marked_[i] && marked_[j] ? cuda::elapsed_ms(events_[i], events_[j]) * 1e-3 : 0.0;
    };
    const int optimizer_end = event_of(Phase::optimizer, Edge::end);
    events_[marked_[optimizer_end] ? optimizer_end : event_of(Phase::backward, Edge::end)].synchronize();
    for (Phase p : kDevicePhases) t[p] = span_s(p);
    marked_.fill(false);
  }

 private:
  // The phases the device times, each by an event at its begin and one at its end. comm_exposed
  // is the compute stream's idle span from the end of backward until DDP's last all-reduce has
  // finished and the Reducer goes on (reducer.cpp); a step that marks no such phase reads 0.
  static constexpr std::array<Phase, 5> kDevicePhases = {Phase::h2d, Phase::forward, Phase::backward,
                                                         Phase::comm_exposed, Phase::optimizer};
  static constexpr int kEvents = 2 * static_cast<int>(kDevicePhases.size());
  static int event_of(Phase p, Edge e) {
    for (size_t k = 0; k < kDevicePhases.size(); ++k)
      if (kDevicePhases[k] == p) return static_cast<int>(2 * k) + (e == Edge::end ? 1 : 0);
    return -1;
  }
  std::unique_ptr<cuda::CudaState> state_;
  std::vector<cuda::Event> events_;
  std::array<bool, kEvents> marked_{};
};

}  // namespace

void enable_peer_access(const std::vector<int>& devices) {
  for (int from : devices)
    for (int to : devices) {
      if (from == to) continue;
      int can = 0;
      DPX_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
      if (!can) continue;  // cudaMemcpy stages through the host instead
      cuda::DeviceGuard guard(from);
      const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // not an error here: clear it
        continue;
      }
      DPX_CUDA_CHECK(err);
    }
}

std::unique_ptr<DeviceEnv> make_cuda_env(int device) {
  if (!cuda::available())
    fail("--devices cuda:", device, ": no usable CUDA device: ", cuda::unavailable_reason());
  if (device >= cuda::device_count())
    fail("--devices cuda:", device, ": this machine has ", cuda::device_count(), " CUDA device(s)");
  return std::make_unique<CudaEnv>(device);
}

}  // namespace dpx::parallel
