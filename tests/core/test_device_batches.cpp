// The loader's GPU feeder, run on the CPU with a host CopyEngine: batches arrive in order with the
// host path's bits for any number of workers, a device buffer is never written while the consumer
// holds a batch in it, every reuse waits for a release recorded after the consumer let go, and
// restarts, errors and shutdown neither lose nor hang. (The CUDA engine is compiled, not run here.)
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/data/device_batches.hpp"
#include "core/data/loader.hpp"
#include "core/data/synthetic.hpp"
#include "tests/common/errors.hpp"

using namespace dpx::data;
using dpx::Shape;
using dpx::Tensor;
using dpx::testing::contains;
using dpx::testing::error_of;

namespace {

// Host "device" memory; records what a GPU engine would be asked to do and checks the rules.
class HostEngine : public CopyEngine {
 public:
  Tensor allocate(const Shape& shape, dpx::DType dtype) override {
    allocations++;
    return Tensor::empty(shape, dtype);
  }
  void record_release(int slot) override {
    std::lock_guard<std::mutex> lock(mu);
    released[slot]++;
  }
  void copy(int slot, Tensor& dst, const Tensor& src) override {
    // Nobody but the ring and this copy's view holds the buffer: the consumer let go of it.
    if (dst.storage().use_count() != 2) overwrites_held++;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (released[slot] == 0) copies_without_release++;
    }
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
    copies++;
    if (slow_copy_ms) std::this_thread::sleep_for(std::chrono::milliseconds(slow_copy_ms));
  }
  std::mutex mu;
  std::map<int, int> released;
  std::atomic<int> allocations{0}, copies{0}, overwrites_held{0}, copies_without_release{0};
  int slow_copy_ms = 0;
};

std::shared_ptr<SyntheticDataset> dataset(int64_t n) {
  SyntheticOptions so;
  so.size = n;
  so.sample_shape = {2, 3, 3};
  so.num_classes = 5;
  return std::make_shared<SyntheticDataset>(so);
}

std::vector<std::vector<float>> epoch(DataLoader& loader, int64_t e) {
  loader.start_epoch(e);
  std::vector<std::vector<float>> out;
  while (auto b = loader.next()) {
    auto v = b->images.to_vector();
    const int64_t* l = b->labels.data<int64_t>();
    for (int64_t i = 0; i < b->labels.numel(); ++i) v.push_back(static_cast<float>(l[i]));
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

TEST_CASE("the feeder delivers the host path's batches, in order, for 0, 1 and 3 workers") {
  auto ds = dataset(53);
  LoaderOptions host;
  host.batch_size = 5;
  host.seed = 3;
  DataLoader reference(ds, host);
  const auto want = epoch(reference, 1);
  for (int workers : {0, 1, 3}) {
    CAPTURE(workers);
    auto engine = std::make_shared<HostEngine>();
    LoaderOptions o = host;
    o.num_workers = workers;
    o.copy_engine = engine;
    DataLoader loader(ds, o);
    CHECK(epoch(loader, 1) == want);
    CHECK(epoch(loader, 1) == want);
    CHECK(engine->overwrites_held == 0);
    CHECK(engine->copies_without_release == 0);
    CHECK(engine->copies == 2 * 2 * 11);  // images and labels of 11 batches, twice
    CHECK(engine->allocations <= 2 * 4);  // a ring of device_ahead + 3 slots, allocated once
  }
}

TEST_CASE("a consumer holding batches keeps their buffers from being overwritten, and does not stall the feeder") {
  auto ds = dataset(40);
  auto engine = std::make_shared<HostEngine>();
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.copy_engine = engine;
  o.device_ahead = 2;
  DataLoader loader(ds, o);
  loader.start_epoch(0);
  // Hold two batches at once while asking for a third, then let them go out of order.
  auto a = loader.next();
  auto b = loader.next();
  const auto a_bits = a->images.to_vector(), b_bits = b->images.to_vector();
  auto c = loader.next();
  REQUIRE(c.has_value());
  CHECK(a->images.to_vector() == a_bits);  // still intact
  CHECK(b->images.to_vector() == b_bits);
  b.reset();
  auto d = loader.next();
  a.reset();
  int rest = 0;
  while (auto e = loader.next()) ++rest;
  CHECK(rest == 6);
  CHECK(engine->overwrites_held == 0);
  CHECK(engine->copies_without_release == 0);
}

TEST_CASE("the feeder restarts mid-epoch, passes errors on, and shuts down while copies wait") {
  auto ds = dataset(60);
  auto engine = std::make_shared<HostEngine>();
  engine->slow_copy_ms = 2;
  LoaderOptions o;
  o.batch_size = 3;
  o.num_workers = 3;
  o.copy_engine = engine;
  {
    DataLoader loader(ds, o);
    loader.start_epoch(0);
    loader.next();
    loader.next();
    loader.start_epoch(2, 5);  // a resumed run: epoch 2 from step 5, the old epoch's batches dropped
    auto b = loader.next();
    REQUIRE(b.has_value());
    CHECK(b->epoch == 2);
    CHECK(b->step == 5);
    // Destroyed with workers and the feeder busy: must return.
  }
  class Failing : public SyntheticDataset {
   public:
    using SyntheticDataset::SyntheticDataset;
    void get(int64_t i, float* x, int64_t* l) const override {
      if (i == 7) dpx::fail("sample 7 is broken");
      SyntheticDataset::get(i, x, l);
    }
  };
  SyntheticOptions so;
  so.size = 20;
  so.sample_shape = {1, 2, 2};
  auto failing = std::make_shared<Failing>(so);
  o.shuffle = false;
  o.batch_size = 4;
  DataLoader loader(failing, o);
  loader.start_epoch(0);
  CHECK(loader.next().has_value());                                      // samples 0-3
  CHECK(contains(error_of([&] { loader.next(); }), "sample 7 is broken"));  // samples 4-7
  CHECK(loader.next().has_value());                                      // 8-11 go on
}
