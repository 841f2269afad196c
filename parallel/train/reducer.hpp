// DistributedDataParallel's gradient reduction, as PyTorch's Reducer does it (Li et al., PVLDB
// 2020; Horovod's Tensor Fusion is the same idea; docs/ARCHITECTURE.md, Studies and references),
// one class for every backend: trainable gradients are fused into buckets (parameters in reverse
// order, a small first bucket, then up to bucket_cap_bytes; 0 gives one bucket per tensor); as
// backward reports gradients ready, each bucket whose gradients are all there is started as an
// asynchronous all-reduce (average), in bucket-index order on every rank, while backward goes on;
// finish() waits for them. With grad_dtype f16 or bf16 (--grad-dtype) a bucket travels in that
// type: divided by the ranks and narrowed when it is started, widened back when it is done.
// A backend differs only behind Communicator::all_reduce_async's Work and, where gradients are
// written on a GPU stream, the GradFence that makes a bucket's all-reduce wait for them.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "parallel/comm/communicator.hpp"
#include "parallel/train/grad_sync.hpp"

namespace dpx::parallel {

struct ReducerOptions {
  size_t bucket_cap_bytes = 25u << 20;   // --bucket-mb (PyTorch: bucket_cap_mb=25)
  size_t first_bucket_bytes = 1u << 20;  // PyTorch: dist._DEFAULT_FIRST_BUCKET_BYTES
  bool overlap = true;                   // false: start every bucket after backward (--no-overlap)
  Algorithm algo = Algorithm::ring;
  DType grad_dtype = DType::f32;         // the all-reduce's dtype: f32, bf16 or f16 (--grad-dtype)
};

struct Bucket {
  int64_t offset = 0, numel = 0;  // a contiguous range of the flat gradient buffer
  int params = 0;                 // parameters in it
};

// Groups the model's trainable parameters into buckets (exposed for tests and `dpx train`).
std::vector<Bucket> plan_buckets(const nn::Model& model, const ReducerOptions& options,
                                 std::unordered_map<const nn::Parameter*, int>* bucket_of = nullptr);

// Where gradients are written asynchronously (a GPU's compute stream), what orders each bucket's
// all-reduce after the work that wrote what it reads. Host ranks need none: their gradients are
// written when backward reports them.
class GradFence {
 public:
  virtual ~GradFence() = default;
  virtual void resize(size_t buckets) = 0;
  // Training thread: every write of `data` (what bucket `bucket`'s all-reduce reads) has been
  // queued before this point.
  virtual void mark(size_t bucket, const Tensor& data) = 0;
  // Before the all-reduce reads the bucket (Communicator::Ready): blocks the communication thread
  // until the writes are done, or makes the communicator's stream wait for them (nccl).
  virtual void wait(size_t bucket) = 0;
  // In a recorded step (--cuda-graph), after the bucket's all-reduce was queued on the
  // communicator's stream: makes the compute stream wait for it there. False where the calls run
  // on a host thread (then the caller waits for the Work).
  virtual bool join(size_t /*bucket*/) { return false; }
};

// The fence a rank computing on `ctx` needs with `comm`: none on the CPU; on a GPU, a CUDA event
// per bucket on ctx's stream, which comm's stream waits for (comm.call_stream()) or else the
// communication thread.
std::unique_ptr<GradFence> make_grad_fence(const Context& ctx, const Communicator& comm);

class Reducer final : public GradSync {
 public:
  // Reduces `model`'s gradients (sets its gradient-ready hook). `ctx`: the rank's compute
  // context (narrowing and widening run on it). `fence`: null takes make_grad_fence(ctx, comm);
  // tests pass their own.
  Reducer(Communicator& comm, nn::Model& model, ReducerOptions options, const Context& ctx,
          std::unique_ptr<GradFence> fence = nullptr);
  ~Reducer() override;
  void begin_step(bool sync) override;
  // The model's gradient-ready hook: `p`'s gradient is final for this backward.
  void grad_ready(const nn::Parameter& p);
  void finish(Context& ctx, StepPhases& phases) override;
  std::vector<Work> record_finish(Context& ctx, StepPhases& phases) override;
  void finish_replayed(const std::vector<Work>& calls, StepPhases& phases) override;
  uint64_t take_sent_bytes() override;
  std::vector<TraceSpan> take_bucket_spans() override { return std::move(bucket_spans_); }
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  bool narrowed() const { return options_.grad_dtype != DType::f32; }
  void start_buckets(size_t end);  // starts buckets [started_, end), in order
  void widen_bucket(size_t i);
  // Waits for bucket i's finished call `w`, counts its bytes and keeps its trace span; its seconds.
  double collect(size_t i, const Work& w);

  Communicator& comm_;
  ReducerOptions options_;
  Context ctx_;
  std::unique_ptr<GradFence> fence_;
  nn::Model& model_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const nn::Parameter*, int> bucket_of_;
  Tensor wire_;               // (the flat gradients' length,) in grad_dtype: the narrowed buckets; f32: unused
  std::vector<int> pending_;  // gradients still missing per bucket
  std::vector<Work> works_;   // per bucket, this step's all-reduce
  size_t started_ = 0;
  bool syncing_ = false;
  uint64_t sent_bytes_ = 0;   // by the all-reduces finished since take_sent_bytes
  std::vector<TraceSpan> bucket_spans_;  // the last finish()'s bucket spans
};

}  // namespace dpx::parallel
