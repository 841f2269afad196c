// DataLoader: the shard of each epoch, batch assembly, the worker pool and, for a GPU, the feeder.
// Workers claim steps in order and the consumer takes them in order from a map keyed by step, so
// the result is the same for any number of workers; prefetch_ bounds how far ahead they run.
#include "core/data/loader.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>

#include "core/clock.hpp"
#include "core/rng.hpp"

namespace dpx::data {

namespace {
// The shuffle's own Philox stream, so its numbers never coincide with weight initialisation's
// from the same seed.
constexpr uint64_t kShuffleStream = 0x53485546464C45ull;  // "SHUFFLE"

void release_pinned_storage(void* p, size_t bytes, Device) { cuda::release_pinned(p, bytes); }

// Device buffers of the ring: the consumer's batch, the one it may still hold while asking for
// the next, the ones ready ahead, and the one being filled.
int ring_slots(int ahead) { return ahead + 3; }
}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), o_(std::move(options)) {
  DPX_CHECK(dataset_ != nullptr, "DataLoader: no data set");
  if (o_.batch_size < 1) usage_fail("the batch size must be at least 1, got ", o_.batch_size);
  if (o_.world < 1 || o_.rank < 0 || o_.rank >= o_.world)
    usage_fail("DataLoader: rank ", o_.rank, " is not in [0, world = ", o_.world, ")");
  if (o_.num_workers < 0) usage_fail("the number of loader workers must be >= 0, got ", o_.num_workers);
  if (o_.prefetch < 0) usage_fail("prefetch must be >= 0, got ", o_.prefetch);
  if (o_.device_ahead < 1) usage_fail("device_ahead must be >= 1, got ", o_.device_ahead);
  const int64_t n = dataset_->size();
  samples_per_rank_ = n / o_.world;
  if (samples_per_rank_ < o_.batch_size)
    usage_fail("the data set ", dataset_->describe(), " has ", n, " samples: over ", o_.world, " rank(s) that is ",
               samples_per_rank_, " per rank, fewer than one batch of ", o_.batch_size,
               "; pass a smaller --batch-size (at most ", samples_per_rank_, " per rank), fewer ranks, or a larger data set");
  steps_ = o_.drop_last ? samples_per_rank_ / o_.batch_size
                        : (samples_per_rank_ + o_.batch_size - 1) / o_.batch_size;
  prefetch_ = o_.prefetch > 0 ? o_.prefetch : 2 * o_.num_workers;
  stats_.workers = std::max(1, o_.num_workers);
  if (o_.copy_engine || o_.device.is_cuda()) {
    std::shared_ptr<CopyEngine> engine = o_.copy_engine;
    if (!engine) engine = make_cuda_copy_engine(o_.device, o_.stream);
    device_batches_ = std::make_unique<DeviceBatches>(std::move(engine), ring_slots(o_.device_ahead));
  }
  workers_.reserve(static_cast<size_t>(o_.num_workers));
  try {
    for (int w = 0; w < o_.num_workers; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
    if (device_batches_) feeder_ = std::thread([this] { feeder_loop(); });
  } catch (...) {  // could not start a thread: stop the ones that did before giving up
    stop_threads();
    throw;
  }
}

DataLoader::~DataLoader() { stop_threads(); }

void DataLoader::stop_threads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  if (device_batches_) device_batches_->stop();  // a feeder waiting for a device buffer
  work_cv_.notify_all();
  ready_cv_.notify_all();
  device_cv_.notify_all();
  for (auto& t : workers_) t.join();
  if (feeder_.joinable()) feeder_.join();
  workers_.clear();
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
  std::map<int64_t, Slot> stale, stale_device;  // freed outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    epoch_ = epoch;
    shard_ = std::move(indices);
    next_claim_ = next_yield_ = next_out_ = first_step;
    stale.swap(ready_);
    stale_device.swap(device_ready_);
    started_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
}

Tensor DataLoader::acquire(const Shape& shape, DType dtype) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  for (const Tensor& t : pool_) {
    if (t.storage().use_count() == 1 && t.shape() == shape && t.dtype() == dtype) {
      // The last other owner released it with an acq_rel decrement; this fence orders its
      // reads of the old batch before our writes of the new one.
      std::atomic_thread_fence(std::memory_order_acquire);
      return t;
    }
  }
  Tensor t;
  if (o_.device.is_cuda()) {  // page-locked, so the copy to the GPU runs without the host
    auto s = std::make_shared<Storage>();
    s->bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    s->data = cuda::allocate_pinned(s->bytes, o_.device.index);
    s->device = Device::cpu();
    s->release = release_pinned_storage;
    t = Tensor::on_storage(std::move(s), shape, dtype);
  } else {
    t = Tensor::empty(shape, dtype);
  }
  // Enough for the batches in flight, the consumer's and one spare, images and labels; beyond
  // that, no pooling.
  if (pool_.size() < static_cast<size_t>(2 * (prefetch_ + 3))) pool_.push_back(t);
  return t;
}

Batch DataLoader::load(const std::vector<int64_t>& shard, int64_t epoch, int64_t step) {
  const double start = now_s();
  Stopwatch sw;
  const int64_t first = step * o_.batch_size;
  const int64_t b = std::min(o_.batch_size, static_cast<int64_t>(shard.size()) - first);
  const Shape s = dataset_->sample_shape();
  const int64_t m = shape_numel(s);
  Tensor images = acquire({b, s[0], s[1], s[2]}, DType::f32), labels = acquire({b}, DType::i64);
  float* image_data = images.data<float>();
  int64_t* label_data = labels.data<int64_t>();
  int64_t kept = 0;
  for (int64_t j = 0; j < b; ++j)
    kept += dataset_->fetch(shard[static_cast<size_t>(first + j)], epoch, image_data + kept * m, label_data + kept);
  if (kept == 0)
    fail("every one of the ", b, " images of step ", step + 1, " of epoch ", epoch + 1,
         " was skipped as unreadable (--on-bad-image skip): the data set is badly damaged; dpx data check lists its "
         "bad files");
  Batch batch;
  batch.images = kept < b ? images.slice(0, kept) : images;
  batch.labels = kept < b ? labels.slice(0, kept) : labels;
  batch.skipped = b - kept;
  batch.epoch = epoch;
  batch.step = step;
  batch.load_s = sw.elapsed_s();
  batch.load_start_s = start;
  batch.load_end_s = start + batch.load_s;
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.batches;
  stats_.images += kept;
  stats_.skipped += b - kept;
  stats_.busy_s += batch.load_s;
  return batch;
}

void DataLoader::worker_loop(int worker) {
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
      slot.batch->worker = worker;
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

// The host side's consumer when batches go to a GPU: takes host batches in step order (loading
// them itself without workers), copies each into a device buffer and parks it for next().
void DataLoader::feeder_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ready_cv_.wait(lock, [this] {
      return stop_ || (started_ && next_yield_ < steps_ && next_yield_ < next_out_ + o_.device_ahead &&
                       (o_.num_workers == 0 || ready_.count(next_yield_) > 0));
    });
    if (stop_) return;
    const int64_t step = next_yield_++;
    const uint64_t generation = generation_;
    Slot host;
    if (o_.num_workers > 0) {
      auto it = ready_.find(step);
      host = std::move(it->second);
      ready_.erase(it);
    }
    const int64_t epoch = epoch_;
    const auto indices = shard_;
    lock.unlock();
    work_cv_.notify_all();  // one more step may now be claimed
    Slot out;
    try {
      if (o_.num_workers == 0) host.batch = load(*indices, epoch, step);
      if (host.error) std::rethrow_exception(host.error);
      Stopwatch sw;
      out.batch = std::move(host.batch);
      auto [images, labels] = device_batches_->upload(out.batch->images, out.batch->labels);
      out.batch->images = std::move(images);  // the pinned host buffers go back to the pool
      out.batch->labels = std::move(labels);
      out.batch->load_s += sw.elapsed_s();
      std::lock_guard<std::mutex> stats_lock(stats_mu_);
      stats_.busy_s += sw.elapsed_s();
    } catch (...) {
      out.batch.reset();
      out.error = std::current_exception();
    }
    lock.lock();
    if (stop_) return;
    if (generation == generation_) {
      device_ready_.emplace(step, std::move(out));
      device_cv_.notify_all();
    }
  }
}

std::optional<Batch> DataLoader::next_host() {
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

std::optional<Batch> DataLoader::next_device() {
  Slot slot;
  double waited = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (next_out_ >= steps_) return std::nullopt;
    const double t0 = now_s();
    // Device buffers the caller let go of become free for the feeder. Checked again while
    // waiting: a batch of an abandoned epoch, dropped by the feeder, frees one too.
    device_batches_->reclaim();
    while (device_ready_.count(next_out_) == 0) {
      device_cv_.wait_for(lock, std::chrono::milliseconds(20));
      device_batches_->reclaim();
    }
    waited = now_s() - t0;
    auto it = device_ready_.find(next_out_);
    slot = std::move(it->second);
    device_ready_.erase(it);
    ++next_out_;
  }
  ready_cv_.notify_all();  // the feeder may go one further
  if (slot.error) std::rethrow_exception(slot.error);
  slot.batch->wait_s = waited;
  return std::move(slot.batch);
}

std::optional<Batch> DataLoader::next() {
  if (!started_) fail("DataLoader::next() called before start_epoch(epoch)");
  std::optional<Batch> b = device_batches_ ? next_device() : next_host();
  if (b) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.waited_s += b->wait_s;
  }
  return b;
}

LoaderStats DataLoader::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

}  // namespace dpx::data
