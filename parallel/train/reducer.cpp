// DistributedDataParallel's bucketed, overlapped gradient all-reduce (see reducer.hpp).
#include "parallel/train/reducer.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "kernels/ops.hpp"

namespace dpx::parallel {

namespace {

// The bucket `grads` in the all-reduce's dtype: f32 travels as it is; f16 or bf16 is divided by the
// ranks in f32 first, narrowed into `wire`, summed in that type and widened back (widen). Dividing
// before the sum keeps it in range: fp16 ends at 65504, which k ranks' gradients near 65504 / k
// would pass if summed first (PyTorch's fp16_compress_hook also divides before the all-reduce,
// though after narrowing).
Tensor narrow(Context& ctx, const Tensor& grads, Tensor wire, int ranks) {
  if (grads.dtype() == wire.dtype()) return grads;
  ops::cast(ctx, wire, grads, 1.f / static_cast<float>(ranks));
  return wire;
}

// The reduced bucket back into the f32 gradients.
void widen(Context& ctx, Tensor grads, const Tensor& wire) {
  if (grads.dtype() != wire.dtype()) ops::cast(ctx, grads, wire, 1.f);
}

void check_wire(DType wire) {
  DPX_CHECK(wire == DType::f32 || wire == DType::f16 || wire == DType::bf16,
            "gradients are all-reduced in f32, bf16 or f16, not ", dtype_name(wire));
}

}  // namespace

#ifdef DPX_WITH_CUDA
std::unique_ptr<GradFence> make_cuda_grad_fence(const Context& ctx, cuda::Stream call_stream);  // cuda/grad_fence.cpp
#endif

std::unique_ptr<GradFence> make_grad_fence(const Context& ctx, const Communicator& comm) {
#ifdef DPX_WITH_CUDA
  if (ctx.device.is_cuda()) return make_cuda_grad_fence(ctx, comm.call_stream());
#endif
  return nullptr;
}

std::vector<Bucket> plan_buckets(const nn::Model& model, const ReducerOptions& options,
                                 std::unordered_map<const nn::Parameter*, int>* bucket_of) {
  std::vector<Bucket> buckets;
  const auto& slots = model.slots();
  // Reverse registration order: roughly the order in which backward finishes gradients, so
  // the first bucket fills first. Consecutive slots in reverse are adjacent in the flat buffer,
  // so each bucket is one contiguous range; a frozen parameter closes the open bucket.
  bool open = false;
  for (auto it = slots.rbegin(); it != slots.rend(); ++it) {
    if (!it->param->requires_grad) {
      open = false;
      continue;
    }
    size_t cap = buckets.empty() || (buckets.size() == 1 && open) ? options.first_bucket_bytes
                                                                  : options.bucket_cap_bytes;
    size_t bytes = static_cast<size_t>(it->numel) * sizeof(float);
    bool fits = open && options.bucket_cap_bytes > 0 &&
                static_cast<size_t>(buckets.back().numel) * sizeof(float) + bytes <= std::max(cap, bytes);
    if (!fits) {
      buckets.push_back({it->offset, 0, 0});
      open = options.bucket_cap_bytes > 0;
    }
    Bucket& b = buckets.back();
    b.offset = it->offset;  // grows downwards
    b.numel += it->numel;
    b.params += 1;
    if (bucket_of) (*bucket_of)[it->param] = static_cast<int>(buckets.size() - 1);
  }
  return buckets;
}

Reducer::Reducer(Communicator& comm, nn::Model& model, ReducerOptions options, const Context& ctx,
                 std::unique_ptr<GradFence> fence)
    : comm_(comm), options_(options), ctx_(ctx), fence_(fence ? std::move(fence) : make_grad_fence(ctx, comm)),
      model_(model) {
  check_wire(options_.grad_dtype);
  buckets_ = plan_buckets(model, options_, &bucket_of_);
  // Each bucket its own part of one buffer: several may be in flight at once.
  if (narrowed()) wire_ = Tensor::empty({model.flat_grads().numel()}, options_.grad_dtype, ctx_.device);
  works_.assign(buckets_.size(), Work());
  if (fence_) fence_->resize(buckets_.size());
  model.root().set_grad_ready_hook([this](nn::Parameter& p) { grad_ready(p); });
}

Reducer::~Reducer() {
  // Only when backward failed midway are calls still in flight: they read this rank's buffers,
  // and every rank starts the same ones, so they finish (or fail, where another rank failed).
  for (const Work& w : works_) {
    try {
      w.wait();
    } catch (const std::exception&) {
    }
  }
}

void Reducer::begin_step(bool sync) {
  syncing_ = sync;
  pending_.resize(buckets_.size());
  for (size_t i = 0; i < buckets_.size(); ++i) pending_[i] = buckets_[i].params;
  started_ = 0;
}

void Reducer::grad_ready(const nn::Parameter& p) {
  if (!syncing_) return;
  const auto it = bucket_of_.find(&p);
  if (it == bucket_of_.end()) return;
  --pending_[static_cast<size_t>(it->second)];
  if (!options_.overlap) return;
  // Strictly in bucket-index order, so that every rank starts the same sequence of all-reduces.
  size_t ready = started_;
  while (ready < buckets_.size() && pending_[ready] == 0) ++ready;
  start_buckets(ready);
}

void Reducer::start_buckets(size_t end) {
  for (; started_ < end; ++started_) {
    const size_t i = started_;
    const Bucket& b = buckets_[i];
    const Tensor grads = model_.flat_grads().view_at(b.offset, {b.numel});
    const Tensor data = narrow(ctx_, grads, narrowed() ? wire_.view_at(b.offset, {b.numel}) : grads, comm_.size());
    Communicator::Ready ready;
    if (fence_) {
      fence_->mark(i, data);
      ready = [fence = fence_.get(), i] { fence->wait(i); };
    }
    works_[i] = comm_.all_reduce_async(data, narrowed() ? ReduceOp::sum : ReduceOp::avg, options_.algo, std::move(ready));
  }
}

void Reducer::widen_bucket(size_t i) {
  if (!narrowed()) return;
  const Bucket& b = buckets_[i];
  widen(ctx_, model_.flat_grads().view_at(b.offset, {b.numel}), wire_.view_at(b.offset, {b.numel}));
}

double Reducer::collect(size_t i, const Work& w) {
  w.wait();
  sent_bytes_ += w.bytes_sent();
  bucket_spans_.push_back({TraceSpan::Kind::bucket, 0, 0, static_cast<int>(i), w.started_s(), w.seconds(),
                           w.bytes_sent(), buckets_[i].numel});
  return w.seconds();
}

void Reducer::finish(Context&, StepPhases& phases) {
  if (!syncing_) return;
  double total_s = 0;
  {
    auto scope = phases.scope(Phase::comm_exposed);  // the communication backward did not hide
    start_buckets(buckets_.size());  // gradients that never reported (unused parameters) are final now
    bucket_spans_.clear();
    for (size_t i = 0; i < buckets_.size(); ++i) {
      total_s += collect(i, works_[i]);
      works_[i] = Work();
      widen_bucket(i);
    }
  }
  phases.add(Phase::comm_total, total_s);
  syncing_ = false;
}

// Recorded once (on a GPU; the CPU's rehearsal runs it at every replay): the compute stream waits
// for each bucket's all-reduce on the device, so the graph's communication branch joins it again
// before the widening and the end of the step. comm_exposed is timed by the graph's own events.
std::vector<Work> Reducer::record_finish(Context&, StepPhases& phases) {
  if (!syncing_) return {};
  {
    auto scope = phases.scope(Phase::comm_exposed);
    start_buckets(buckets_.size());
    for (size_t i = 0; i < buckets_.size(); ++i) {
      if (!fence_ || !fence_->join(i)) works_[i].wait();  // host ranks (the CPU's rehearsal)
      widen_bucket(i);
    }
  }
  syncing_ = false;
  std::vector<Work> calls(buckets_.size());
  calls.swap(works_);
  return calls;
}

// Each replay ran the recorded calls again: their events (nccl) were recorded anew, so waiting for
// and reading them gives this replay's.
void Reducer::finish_replayed(const std::vector<Work>& calls, StepPhases& phases) {
  syncing_ = false;
  if (calls.empty()) return;
  phases.replayed(Phase::comm_exposed);
  bucket_spans_.clear();
  double total_s = 0;
  for (size_t i = 0; i < calls.size(); ++i) total_s += collect(i, calls[i]);
  phases.add(Phase::comm_total, total_s);
}

uint64_t Reducer::take_sent_bytes() {
  const uint64_t bytes = sent_bytes_;
  sent_bytes_ = 0;
  return bytes;
}

}  // namespace dpx::parallel
