// DistributedDataParallel's gradient synchronisation, as PyTorch DDP does it (Li et al.,
// PVLDB 2020; Horovod's Tensor Fusion is the same idea; docs/ARCHITECTURE.md, Studies and
// references): trainable gradients are fused into buckets (parameters in reverse order, a small
// first bucket, then up to bucket_cap_bytes), each bucket is all-reduced by a communication
// thread as soon as all its gradients are ready while backward goes on, in bucket-index order
// on every rank, and then averaged. bucket_cap_bytes = 0 gives one all-reduce per tensor.
// With grad_dtype f16 or bf16 (--grad-dtype) a bucket travels in that type: half the bytes.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "parallel/comm/communicator.hpp"
#include "parallel/train/grad_sync.hpp"

namespace dpx::parallel {

struct DdpOptions {
  size_t bucket_cap_bytes = 25u << 20;   // --bucket-mb (PyTorch: bucket_cap_mb=25)
  size_t first_bucket_bytes = 1u << 20;  // PyTorch: dist._DEFAULT_FIRST_BUCKET_BYTES
  bool overlap = true;                   // false: reduce every bucket after backward (--no-overlap)
  std::string algo = "ring";
  DType grad_dtype = DType::f32;         // the all-reduce's dtype: f32, bf16 or f16 (--grad-dtype)
};

struct Bucket {
  int64_t offset = 0, numel = 0;  // a contiguous range of the flat gradient buffer
  int params = 0;                 // parameters in it
};

// Groups the model's trainable parameters into buckets (exposed for tests and `dpx train`).
std::vector<Bucket> plan_buckets(const nn::Model& model, const DdpOptions& options,
                                 std::unordered_map<const nn::Parameter*, int>* bucket_of = nullptr);

// The mean of `grads` (f32, in place) over the ranks, all-reduced in `wire`: f32 as it is; f16 or
// bf16 divided by the number of ranks in f32 first, narrowed into `staging` (of `wire`, at least
// as long), summed in that type and widened back. Dividing before the sum keeps it in range: fp16
// ends at 65504, which k ranks' gradients near 65504 / k would pass if summed first (PyTorch's
// fp16_compress_hook also divides before the all-reduce, though after narrowing).
void all_reduce_mean(Communicator& comm, const Tensor& grads, DType wire, const Tensor& staging, Algorithm algo);

// Where gradients are written asynchronously (a GPU rank of the p2p backend: kernels queued on
// the compute stream), what orders each bucket's all-reduce after the work that wrote it. Host
// ranks need none: their gradients are written when the hook reports them.
class BucketFence {
 public:
  virtual ~BucketFence() = default;
  virtual void resize(size_t buckets) = 0;
  // Training thread: every write of bucket i's gradients has been queued before this point.
  virtual void mark(size_t bucket) = 0;
  // Communication thread (or the training thread without overlap): waits until they are done.
  virtual void wait(size_t bucket) = 0;
};

class DdpSync final : public GradSync {
 public:
  // `fence` orders device gradients (null for host ranks).
  DdpSync(Communicator& comm, DdpOptions options, std::unique_ptr<BucketFence> fence = nullptr);
  ~DdpSync() override;
  void attach(nn::Model& model) override;
  void begin_step(bool sync) override;
  void finish(Context& ctx, StepPhases& phases) override;
  uint64_t take_sent_bytes() override;
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void on_grad_ready(const nn::Parameter& p);
  void comm_loop();
  void reduce_bucket(size_t i);  // all-reduce and average; timed into comm_s_

  Communicator& comm_;
  DdpOptions options_;
  Algorithm algo_;
  std::unique_ptr<BucketFence> fence_;
  nn::Model* model_ = nullptr;
  std::vector<Bucket> buckets_;
  Tensor staging_;                    // (largest bucket,) in grad_dtype; unused for f32
  std::unordered_map<const nn::Parameter*, int> bucket_of_;
  std::vector<int> pending_;          // gradients still missing per bucket
  bool syncing_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  size_t next_ready_ = 0;             // buckets [0, next_ready_) may be launched, in order
  std::vector<bool> ready_;
  size_t launched_ = 0, done_ = 0;
  double comm_s_ = 0;                 // all-reduce time of this step (comm thread)
  bool stop_ = false;
  std::exception_ptr error_;
  uint64_t bytes_mark_ = 0;
  std::thread thread_;
};

}  // namespace dpx::parallel
