// DistributedDataParallel on GPUs (--backend nccl): the buckets and their order are DDP's
// (ddp.hpp: plan_buckets, launched in bucket-index order on every rank as their last gradient
// is ready); what changes is how a bucket waits and travels. When a bucket's last gradient has
// been queued on the compute stream, an event recorded there makes the communication stream wait
// for it, and the bucket's all-reduce (NCCL's average) is queued on the communication stream,
// so it runs on the GPU while backward goes on; no host thread waits for anything until finish.
// finish makes the compute stream wait for the last all-reduce: that wait, timed by CUDA events
// on the compute stream (Phase::comm_exposed, device_env_cuda.cpp), is the communication backward
// did not hide; comm_total is the sum of the all-reduces' own event-timed spans.
// With --grad-dtype bf16|fp16 each bucket is divided by the ranks and narrowed into a staging
// buffer on the compute stream (ops::cast, the CPU ranks' rounding), NCCL sums the halves, and
// finish widens them back into the fp32 gradients on the compute stream, inside comm_exposed.
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/cuda/context.hpp"
#include "core/cuda/event.hpp"
#include "core/error.hpp"
#include "kernels/ops.hpp"
#include "parallel/train/ddp.hpp"
#include "parallel/comm/nccl/nccl_backend.hpp"
#include "parallel/comm/nccl/cuda/nccl_comm.hpp"

namespace dpx::parallel {

namespace {

class CudaDdpSync final : public GradSync {
 public:
  CudaDdpSync(nccl::NcclCommunicator& comm, DdpOptions options, const Context& ctx)
      : comm_(comm), options_(std::move(options)), ctx_(ctx), compute_(cuda::state_of(ctx).stream),
        device_(ctx.device.index), done_(device_, false) {
    DPX_CHECK(options_.grad_dtype == DType::f32 || options_.grad_dtype == DType::bf16 ||
                  options_.grad_dtype == DType::f16,
              "gradients are all-reduced in f32, bf16 or f16, not ", dtype_name(options_.grad_dtype));
    DPX_CHECK(comm_.device() == device_, "the nccl communicator is on cuda:", comm_.device(), ", the rank on cuda:",
              device_);
  }

  void attach(nn::Model& model) override {
    model_ = &model;
    bucket_of_.clear();
    buckets_ = plan_buckets(model, options_, &bucket_of_);
    // Every bucket its own part of one staging buffer: several may be in flight on the stream.
    if (narrowed()) staging_ = Tensor::empty({model.flat_grads().numel()}, options_.grad_dtype, ctx_.device);
    ready_events_.clear();
    starts_.clear();
    ends_.clear();
    for (size_t i = 0; i < buckets_.size(); ++i) {
      ready_events_.emplace_back(device_, false);
      starts_.emplace_back(device_);
      ends_.emplace_back(device_);
    }
    model.root().set_grad_ready_hook([this](nn::Parameter& p) { on_grad_ready(p); });
  }

  void begin_step(bool sync) override {
    syncing_ = sync;
    pending_.assign(buckets_.size(), 0);
    for (size_t i = 0; i < buckets_.size(); ++i) pending_[i] = buckets_[i].params;
    launched_ = 0;
  }

  void finish(Context& ctx, StepPhases& phases) override {
    if (!syncing_) return;
    launch_up_to(buckets_.size());  // gradients that never reported (unused parameters) are final now
    {
      auto scope = phases.scope(Phase::comm_exposed);
      done_.record(comm_.stream());
      done_.wait_on(compute_);  // the compute stream stalls here for what backward did not hide
      if (narrowed())
        for (const Bucket& b : buckets_) {
          Tensor grads = model_->flat_grads().view_at(b.offset, {b.numel});
          ops::cast(ctx_, grads, staging_.view_at(b.offset, {b.numel}), 1.f);
        }
    }
    comm_.synchronize();  // the watchdog's wait: errors and --comm-timeout surface here
    double total_s = 0;
    for (size_t i = 0; i < buckets_.size(); ++i) total_s += cuda::elapsed_ms(starts_[i], ends_[i]) * 1e-3;
    phases.add(Phase::comm_total, total_s);
    syncing_ = false;
  }

  // NCCL does not count bytes: what a ring all-reduce sends, 2 (n - 1) / n of each bucket per rank
  // (NCCL may pick a tree; the bytes of the bandwidth-optimal schedule are the figure compared).
  uint64_t take_sent_bytes() override {
    const uint64_t bytes = sent_bytes_;
    sent_bytes_ = 0;
    return bytes;
  }

 private:
  void on_grad_ready(const nn::Parameter& p) {
    if (!syncing_) return;
    auto it = bucket_of_.find(&p);
    if (it == bucket_of_.end()) return;
    --pending_[static_cast<size_t>(it->second)];
    size_t next = launched_;
    while (next < buckets_.size() && pending_[next] <= 0) ++next;
    if (options_.overlap) launch_up_to(next);
  }

  bool narrowed() const { return options_.grad_dtype != DType::f32; }

  // Queues the all-reduces of buckets [launched_, end), in bucket-index order.
  void launch_up_to(size_t end) {
    const int n = comm_.size();
    for (; launched_ < end; ++launched_) {
      const Bucket& b = buckets_[launched_];
      Tensor grads = model_->flat_grads().view_at(b.offset, {b.numel});
      Tensor half;
      if (narrowed()) {  // divided before the sum, so that k halves of 65504 / k cannot overflow
        half = staging_.view_at(b.offset, {b.numel});
        ops::cast(ctx_, half, grads, 1.f / static_cast<float>(n));
      }
      ready_events_[launched_].record(compute_);  // the bucket's gradients are queued before this point
      ready_events_[launched_].wait_on(comm_.stream());
      starts_[launched_].record(comm_.stream());
      if (narrowed())
        comm_.all_reduce(half, ReduceOp::sum);
      else
        comm_.all_reduce(grads, ReduceOp::avg);
      ends_[launched_].record(comm_.stream());
      sent_bytes_ += static_cast<uint64_t>(2.0 * (n - 1) / n * static_cast<double>(b.numel) *
                                           static_cast<double>(dtype_size(options_.grad_dtype)));
    }
  }

  nccl::NcclCommunicator& comm_;
  DdpOptions options_;
  Context ctx_;  // the rank's compute stream: narrowing and widening run there
  cudaStream_t compute_;
  int device_;
  nn::Model* model_ = nullptr;
  std::vector<Bucket> buckets_;
  std::unordered_map<const nn::Parameter*, int> bucket_of_;
  Tensor staging_;            // --grad-dtype bf16|fp16: the narrowed gradients, on the GPU
  std::vector<int> pending_;  // gradients still missing per bucket
  size_t launched_ = 0;
  bool syncing_ = false;
  std::vector<cuda::Event> ready_events_, starts_, ends_;  // per bucket
  cuda::Event done_;
  uint64_t sent_bytes_ = 0;
};

}  // namespace

std::unique_ptr<GradSync> make_nccl_ddp_sync(Communicator& comm, const DdpOptions& options, const Context& ctx) {
  auto* nccl = dynamic_cast<nccl::NcclCommunicator*>(&comm);
  DPX_CHECK(nccl != nullptr, "DDP on GPUs needs the nccl backend's communicator, not ", comm.backend(), "'s");
  return std::make_unique<CudaDdpSync>(*nccl, options, ctx);
}

}  // namespace dpx::parallel
