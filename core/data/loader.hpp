// DataLoader: batches from a Dataset, shuffled per epoch, sharded over ranks like
// torch.utils.data.DistributedSampler(drop_last=True), and prefetched by worker threads. The
// batch sequence depends only on (seed, epoch, rank, world, batch_size): never on num_workers.
// For a GPU the batches are assembled in pinned (page-locked) host memory and copied to the device
// by a feeder thread on a stream of its own, ahead of the step that uses them (device_batches.hpp).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/data/dataset.hpp"
#include "core/data/device_batches.hpp"

namespace dpx::data {

struct LoaderOptions {
  int64_t batch_size = 64;  // per rank
  bool shuffle = true;      // a new permutation each epoch, from (seed, epoch)
  bool drop_last = false;   // drop this rank's last, partial batch
  uint64_t seed = 0;
  int rank = 0, world = 1;  // this rank's shard of each epoch
  int num_workers = 0;      // loader threads; 0 loads in the thread that calls next()
  int prefetch = 0;         // batches loaded ahead (in progress or ready); 0: 2 per worker, as
                            // PyTorch's prefetch_factor=2
  // Where next() delivers batches. A GPU (cuda:N): host batches in pinned memory, copied by a
  // feeder thread on its own stream, at most device_ahead batches ahead of the consumer, whose
  // kernels run on `stream` (the buffers of a batch are reused only after that stream has
  // passed the work queued before the consumer let go of it).
  Device device = Device::cpu();
  cuda::Stream stream = nullptr;
  int device_ahead = 1;
  // Another engine than CUDA's for the feeder (tests run the feeder's logic on the CPU with one).
  std::shared_ptr<CopyEngine> copy_engine = nullptr;
};

// What the loader's workers did so far: their throughput is images / busy_s per worker.
struct LoaderStats {
  int workers = 0;        // threads that load (1 when the consumer loads itself)
  int64_t batches = 0, images = 0;
  int64_t skipped = 0;    // samples left out of their batch (--on-bad-image skip)
  double busy_s = 0;      // summed over the workers: reading, decoding, transforming, copying
  double waited_s = 0;    // summed over next() calls: how long the consumer waited
  double images_per_worker_s() const { return busy_s > 0 ? static_cast<double>(images) / busy_s : 0; }
  void add(const LoaderStats& o) {  // another rank's loader
    workers += o.workers;
    batches += o.batches;
    images += o.images;
    skipped += o.skipped;
    busy_s += o.busy_s;
    waited_s += o.waited_s;
  }
};

struct Batch {
  Tensor images;         // (B, C, H, W) f32, on LoaderOptions::device
  Tensor labels;         // (B) i64, likewise
  int64_t epoch = 0, step = 0;
  int64_t skipped = 0;   // samples of this step left out (bad images under --on-bad-image skip): B
                         // is the batch size less these
  double wait_s = 0;     // time next() blocked for this batch (with 0 workers: the whole load)
  double load_s = 0;     // time spent producing it (fetching and transforming its samples)
  double load_start_s = 0, load_end_s = 0;  // steady clock (now_s) around its loading on the host (traces)
  int worker = -1;       // the worker thread that loaded it (0 ..); -1: the thread that called next()
                         // (or, with a GPU and no workers, the feeder)
};

// Sharding: every epoch, the whole data set is permuted (the same permutation on every rank,
// from the seed and the epoch), the tail that does not divide by `world` is dropped, and rank r
// takes positions r, r + world, r + 2 world, ... (as DistributedSampler with drop_last=True).
// So every rank has samples_per_rank() = size / world samples and the same number of steps, the
// shards are disjoint, and the dropped tail (size % world samples) changes from epoch to epoch.
// With shuffle off the order is 0, 1, 2, ... and the same tail is dropped every epoch.
class DataLoader {
 public:
  // Throws dpx::UsageError when a rank's shard holds fewer samples than one batch.
  DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  // Stops the workers; safe mid-epoch (waits at most for the batches being loaded).
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins epoch `epoch` at batch `first_step` (any order; restarting discards what was
  // prefetched). A resumed run starts where its checkpoint stopped, without loading the rest.
  void start_epoch(int64_t epoch, int64_t first_step = 0);
  // The next batch of the epoch in order, or nullopt at its end. Rethrows the exception a worker
  // (or the dataset) threw for this batch. Throws when every sample of a batch was skipped.
  std::optional<Batch> next();
  LoaderStats stats() const;

  int64_t steps_per_epoch() const { return steps_; }
  int64_t samples_per_rank() const { return samples_per_rank_; }
  // This rank's sample indices for an epoch, in the order batches take them.
  std::vector<int64_t> shard(int64_t epoch) const;
  // The whole data set's order in an epoch, which every rank's shard is dealt from.
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  const LoaderOptions& options() const { return o_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  struct Slot {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };
  Batch load(const std::vector<int64_t>& shard, int64_t epoch, int64_t step);
  // A host buffer of `shape`: a pooled one nobody else holds any more, or a new one (pinned when
  // batches go to a GPU).
  Tensor acquire(const Shape& shape, DType dtype);
  void worker_loop(int worker);
  void feeder_loop();
  std::optional<Batch> next_host();
  std::optional<Batch> next_device();
  void stop_threads();

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions o_;
  int64_t samples_per_rank_ = 0, steps_ = 0;

  // Everything below is guarded by mu_. Workers claim steps in order (next_claim_), at most
  // prefetch_ ahead of the host consumer (next_yield_: the caller of next(), or the feeder), and
  // park finished ones in ready_ by step; generation_ changes with every start_epoch so late
  // batches of an old epoch are dropped. With a GPU, the feeder moves them in step order to
  // device_ready_, at most device_ahead ahead of the caller (next_out_).
  std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_, device_cv_;
  bool stop_ = false;
  bool started_ = false;
  uint64_t generation_ = 0;
  int64_t epoch_ = 0;
  std::shared_ptr<const std::vector<int64_t>> shard_;
  int64_t next_claim_ = 0, next_yield_ = 0, next_out_ = 0;
  int prefetch_ = 0;
  std::map<int64_t, Slot> ready_, device_ready_;
  std::vector<std::thread> workers_;
  std::thread feeder_;
  std::unique_ptr<DeviceBatches> device_batches_;

  mutable std::mutex stats_mu_;
  LoaderStats stats_;

  // Buffers handed out before. Reusing one whose only owner is the pool saves the page faults of
  // a fresh allocation (a 64 x 3 x 224 x 224 batch is 38 MB: ~9400 pages) or cudaHostAlloc's cost.
  std::mutex pool_mu_;
  std::vector<Tensor> pool_;
};

}  // namespace dpx::data
