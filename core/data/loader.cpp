// DataLoader: the shard of each epoch, batch assembly, and the worker pool. Workers claim
// steps in order and the consumer takes them in order from a map keyed by step, so the result
// is the same for any number of workers; prefetch_ bounds how far ahead they run.
#include "core/data/loader.hpp"

#include <algorithm>
#include <atomic>
#include <numeric>

#include "core/clock.hpp"
#include "core/rng.hpp"

namespace dpx::data {

namespace {
// The shuffle's own Philox stream, so its numbers never coincide with weight initialisation's
// from the same seed.
constexpr uint64_t kShuffleStream = 0x53485546464C45ull;  // "SHUFFLE"
}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), o_(options) {
  DPX_CHECK(dataset_ != nullptr, "DataLoader: no data set");
  if (o_.batch_size < 1) usage_fail("the batch size must be at least 1, got ", o_.batch_size);
  if (o_.world < 1 || o_.rank < 0 || o_.rank >= o_.world)
    usage_fail("DataLoader: rank ", o_.rank, " is not in [0, world = ", o_.world, ")");
  if (o_.num_workers < 0) usage_fail("the number of loader workers must be >= 0, got ", o_.num_workers);
  if (o_.prefetch < 0) usage_fail("prefetch must be >= 0, got ", o_.prefetch);
  const int64_t n = dataset_->size();
  samples_per_rank_ = n / o_.world;
  if (samples_per_rank_ < o_.batch_size)
    usage_fail("the data set ", dataset_->describe(), " has ", n, " samples: over ", o_.world, " rank(s) that is ",
               samples_per_rank_, " per rank, fewer than one batch of ", o_.batch_size,
               "; pass a smaller --batch-size (at most ", samples_per_rank_, " per rank), fewer ranks, or a larger data set");
  steps_ = o_.drop_last ? samples_per_rank_ / o_.batch_size
                        : (samples_per_rank_ + o_.batch_size - 1) / o_.batch_size;
  prefetch_ = o_.prefetch > 0 ? o_.prefetch : 2 * o_.num_workers;
  workers_.reserve(static_cast<size_t>(o_.num_workers));
  try {
    for (int w = 0; w < o_.num_workers; ++w) workers_.emplace_back([this] { worker_loop(); });
  } catch (...) {  // could not start a thread: stop the ones that did before giving up
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
    throw;
  }
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  const int64_t n = dataset_->size();
  std::vector<int64_t> order;
  if (o_.shuffle) {
    Rng rng = Rng(o_.seed, kShuffleStream).fork(static_cast<uint64_t>(epoch));
    order = permutation(n, rng);
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
  }
  return order;
}

std::vector<int64_t> DataLoader::shard(int64_t epoch) const {
  const std::vector<int64_t> order = epoch_order(epoch);
  std::vector<int64_t> mine(static_cast<size_t>(samples_per_rank_));
  for (int64_t j = 0; j < samples_per_rank_; ++j) mine[j] = order[static_cast<size_t>(o_.rank + j * o_.world)];
  return mine;
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_step) {
  if (first_step < 0 || first_step > steps_)
    fail("DataLoader::start_epoch: step ", first_step, " is outside the epoch's ", steps_, " steps");
  auto indices = std::make_shared<const std::vector<int64_t>>(shard(epoch));
  std::map<int64_t, Slot> stale;  // freed outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    epoch_ = epoch;
    shard_ = std::move(indices);
    next_claim_ = next_yield_ = first_step;
    stale.swap(ready_);
    started_ = true;
  }
  work_cv_.notify_all();
}

Tensor DataLoader::acquire_images(const Shape& shape) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  for (const Tensor& t : pool_) {
    if (t.storage().use_count() == 1 && t.shape() == shape) {
      // The last other owner released it with an acq_rel decrement; this fence orders its
      // reads of the old batch before our writes of the new one.
      std::atomic_thread_fence(std::memory_order_acquire);
      return t;
    }
  }
  Tensor t = Tensor::empty(shape, DType::f32);
  // Enough for the batches in flight, the consumer's and one spare; beyond that, no pooling.
  if (pool_.size() < static_cast<size_t>(prefetch_ + 2)) pool_.push_back(t);
  return t;
}

Batch DataLoader::load(const std::vector<int64_t>& shard, int64_t epoch, int64_t step) {
  Stopwatch sw;
  const int64_t first = step * o_.batch_size;
  const int64_t b = std::min(o_.batch_size, static_cast<int64_t>(shard.size()) - first);
  const Shape s = dataset_->sample_shape();
  const int64_t m = shape_numel(s);
  Batch batch;
  batch.images = acquire_images({b, s[0], s[1], s[2]});
  batch.labels = Tensor::empty({b}, DType::i64);
  float* images = batch.images.data<float>();
  int64_t* labels = batch.labels.data<int64_t>();
  for (int64_t j = 0; j < b; ++j) dataset_->get(shard[static_cast<size_t>(first + j)], images + j * m, labels + j);
  batch.epoch = epoch;
  batch.step = step;
  batch.load_s = sw.elapsed_s();
  return batch;
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] {
      return stop_ || (started_ && next_claim_ < steps_ && next_claim_ < next_yield_ + prefetch_);
    });
    if (stop_) return;
    const int64_t step = next_claim_++;
    const uint64_t generation = generation_;
    const int64_t epoch = epoch_;
    const auto indices = shard_;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = load(*indices, epoch, step);
    } catch (...) {
      slot.error = std::current_exception();  // handed to next() for this step
    }
    lock.lock();
    if (generation == generation_) {  // else it belongs to an abandoned epoch and is dropped
      ready_.emplace(step, std::move(slot));
      ready_cv_.notify_all();
    }
  }
}

std::optional<Batch> DataLoader::next() {
  if (!started_) fail("DataLoader::next() called before start_epoch(epoch)");
  if (o_.num_workers == 0) {
    if (next_yield_ >= steps_) return std::nullopt;
    const int64_t step = next_yield_++;  // a failed batch is skipped, as with workers
    Batch b = load(*shard_, epoch_, step);
    b.wait_s = b.load_s;  // the caller waited for the whole load
    return b;
  }
  Slot slot;
  double waited = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (next_yield_ >= steps_) return std::nullopt;
    const double t0 = now_s();
    ready_cv_.wait(lock, [this] { return ready_.count(next_yield_) > 0; });
    waited = now_s() - t0;
    auto it = ready_.find(next_yield_);
    slot = std::move(it->second);
    ready_.erase(it);
    ++next_yield_;
  }
  work_cv_.notify_all();  // one more step may now be claimed
  if (slot.error) std::rethrow_exception(slot.error);
  slot.batch->wait_s = waited;
  return std::move(slot.batch);
}

}  // namespace dpx::data
