// DataLoader: batches from a Dataset, shuffled per epoch, sharded over ranks like
// torch.utils.data.DistributedSampler(drop_last=True), and prefetched by worker threads. The
// batch sequence depends only on (seed, epoch, rank, world, batch_size): never on num_workers.
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

#include "core/data/dataset.hpp"

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
};

struct Batch {
  Tensor images;         // (B, C, H, W) f32, host
  Tensor labels;         // (B) i64, host
  int64_t epoch = 0, step = 0;
  double wait_s = 0;     // time next() blocked for this batch (with 0 workers: the whole load)
  double load_s = 0;     // time spent producing it (fetching and transforming its samples)
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
  // (or the dataset) threw for this batch.
  std::optional<Batch> next();

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
  // An image buffer of `shape`: a pooled one nobody else holds any more, or a new one.
  Tensor acquire_images(const Shape& shape);
  void worker_loop();

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions o_;
  int64_t samples_per_rank_ = 0, steps_ = 0;

  // Everything below is guarded by mu_. Workers claim steps in order (next_claim_), at most
  // prefetch_ ahead of the consumer (next_yield_), and park finished ones in ready_ by step;
  // generation_ changes with every start_epoch so late batches of an old epoch are dropped.
  std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  bool stop_ = false;
  bool started_ = false;
  uint64_t generation_ = 0;
  int64_t epoch_ = 0;
  std::shared_ptr<const std::vector<int64_t>> shard_;
  int64_t next_claim_ = 0, next_yield_ = 0;
  int prefetch_ = 0;
  std::map<int64_t, Slot> ready_;
  std::vector<std::thread> workers_;

  // Image buffers handed out before. Reusing one whose only owner is the pool saves the page
  // faults of a fresh allocation (a 64 x 3 x 224 x 224 batch is 38 MB: ~9400 pages).
  std::mutex pool_mu_;
  std::vector<Tensor> pool_;
};

}  // namespace dpx::data
