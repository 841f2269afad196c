// DistributedDataParallel's bucketed, overlapped gradient all-reduce (see ddp.hpp).
#include "parallel/train/ddp.hpp"

#include <algorithm>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "kernels/ops.hpp"

namespace dpx::parallel {

std::vector<Bucket> plan_buckets(const nn::Model& model, const DdpOptions& options,
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

void all_reduce_mean(Communicator& comm, const Tensor& grads, DType wire, const Tensor& staging, Algorithm algo) {
  if (wire == DType::f32) {
    comm.all_reduce(grads, ReduceOp::avg, algo);
    return;
  }
  DPX_CHECK(wire == DType::f16 || wire == DType::bf16, "gradients are all-reduced in f32, bf16 or f16, not ",
            dtype_name(wire));
  const int64_t n = grads.numel();
  DPX_CHECK(staging.dtype() == wire && staging.numel() >= n, "the staging buffer does not fit the gradients");
  Context one_thread = Context::cpu(1);  // the communication thread's share of the cores
  Tensor h = staging.view_at(0, {n});
  Tensor g = grads;
  ops::cast(one_thread, h, g, 1.f / static_cast<float>(comm.size()));  // divided first: no fp16 overflow
  comm.all_reduce(h, ReduceOp::sum, algo);
  ops::cast(one_thread, g, h, 1.f);
}

DdpSync::DdpSync(Communicator& comm, DdpOptions options, std::unique_ptr<BucketFence> fence)
    : comm_(comm), options_(std::move(options)), algo_(parse_algorithm(options_.algo)), fence_(std::move(fence)) {
  if (options_.overlap) thread_ = std::thread([this] { comm_loop(); });
}

DdpSync::~DdpSync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DdpSync::attach(nn::Model& model) {
  model_ = &model;
  bucket_of_.clear();
  buckets_ = plan_buckets(model, options_, &bucket_of_);
  int64_t largest = 0;
  for (const Bucket& b : buckets_) largest = std::max(largest, b.numel);
  if (options_.grad_dtype != DType::f32) staging_ = Tensor::empty({largest}, options_.grad_dtype);
  if (fence_) fence_->resize(buckets_.size());
  model.root().set_grad_ready_hook([this](nn::Parameter& p) { on_grad_ready(p); });
  bytes_mark_ = comm_.bytes_sent();  // the initial broadcast is not gradient traffic
}

void DdpSync::begin_step(bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  syncing_ = sync;
  pending_.assign(buckets_.size(), 0);
  for (const auto& b : buckets_) pending_[&b - buckets_.data()] = b.params;
  ready_.assign(buckets_.size(), false);
  next_ready_ = launched_ = done_ = 0;
  comm_s_ = 0;
}

void DdpSync::on_grad_ready(const nn::Parameter& p) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!syncing_) return;
  auto it = bucket_of_.find(&p);
  if (it == bucket_of_.end()) return;
  if (--pending_[it->second] == 0) {
    if (fence_) fence_->mark(static_cast<size_t>(it->second));
    ready_[it->second] = true;
  }
  // Launch strictly in bucket-index order, so every rank issues the same all-reduce sequence.
  while (next_ready_ < ready_.size() && ready_[next_ready_]) ++next_ready_;
  if (options_.overlap) cv_.notify_all();
}

void DdpSync::reduce_bucket(size_t i) {
  if (fence_) fence_->wait(i);  // the device has written the bucket (not communication time)
  double t = now_s();
  Tensor range = model_->flat_grads().view_at(buckets_[i].offset, {buckets_[i].numel});
  all_reduce_mean(comm_, range, options_.grad_dtype, staging_, algo_);  // one bucket at a time: one staging
  double dt = now_s() - t;
  std::lock_guard<std::mutex> lock(mu_);
  comm_s_ += dt;
}

void DdpSync::comm_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (syncing_ && launched_ < next_ready_); });
    if (stop_) return;
    size_t i = launched_++;
    lock.unlock();
    try {
      reduce_bucket(i);
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      done_ = buckets_.size();
      cv_.notify_all();
      return;
    }
    lock.lock();
    ++done_;
    cv_.notify_all();
  }
}

void DdpSync::finish(Context& ctx, StepPhases& phases) {
  if (!syncing_) return;
  {
    auto scope = phases.scope(Phase::comm_exposed);  // the communication backward did not hide
    {
      // Gradients that never reported (parameters unused in this forward) are final now.
      std::lock_guard<std::mutex> lock(mu_);
      if (fence_)
        for (size_t i = 0; i < ready_.size(); ++i)
          if (!ready_[i]) fence_->mark(i);
      std::fill(ready_.begin(), ready_.end(), true);
      next_ready_ = ready_.size();
    }
    if (options_.overlap) {
      cv_.notify_all();
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return done_ >= buckets_.size(); });
      if (error_) std::rethrow_exception(error_);
    } else {
      for (size_t i = 0; i < buckets_.size(); ++i) reduce_bucket(i);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  phases.add(Phase::comm_total, comm_s_);
  syncing_ = false;
}

uint64_t DdpSync::take_sent_bytes() {
  uint64_t now = comm_.bytes_sent();
  uint64_t d = now - bytes_mark_;
  bytes_mark_ = now;
  return d;
}

}  // namespace dpx::parallel
