// Tests of the DataLoader (batches, distributed shards, per-epoch shuffles, worker threads,
// timing, errors, shutdown) and of the SyntheticDataset (reproducible per sample, learnable).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/data/loader.hpp"
#include "core/data/synthetic.hpp"
#include "tests/common/errors.hpp"

using dpx::Shape;
using dpx::Tensor;
using namespace dpx::data;

using dpx::testing::contains;
using dpx::testing::error_of;

namespace {

// Sample i is the image (i, -i) with label i, so a batch tells which samples it holds. It can
// sleep per sample (a slow disk) and throw for one index (a bad file).
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n, double sleep_s = 0, int64_t throw_at = -1)
      : n_(n), sleep_s_(sleep_s), throw_at_(throw_at) {}
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {1, 1, 2}; }
  int64_t num_classes() const override { return n_; }
  void get(int64_t i, float* image, int64_t* label) const override {
    if (sleep_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s_));
    if (i == throw_at_) dpx::fail("cannot decode sample ", i);
    image[0] = static_cast<float>(i);
    image[1] = -static_cast<float>(i);
    *label = i;
  }
  std::string describe() const override { return "index(" + std::to_string(n_) + ")"; }

 private:
  int64_t n_;
  double sleep_s_;
  int64_t throw_at_;
};

std::vector<int64_t> labels_of(const Batch& b) {
  const int64_t* p = b.labels.data<int64_t>();
  return std::vector<int64_t>(p, p + b.labels.numel());
}

// Every batch of one epoch.
std::vector<Batch> epoch_batches(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

std::vector<int64_t> epoch_labels(DataLoader& loader, int64_t epoch) {
  std::vector<int64_t> all;
  for (const Batch& b : epoch_batches(loader, epoch)) {
    auto l = labels_of(b);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

}  // namespace

TEST_CASE("DataLoader: batch shapes, steps per epoch and drop_last") {
  auto ds = std::make_shared<IndexDataset>(103);
  LoaderOptions o;
  o.batch_size = 10;
  o.shuffle = false;
  DataLoader keep(ds, o);
  CHECK(keep.steps_per_epoch() == 11);
  auto batches = epoch_batches(keep, 0);
  REQUIRE(batches.size() == 11);
  CHECK(batches[0].images.shape() == Shape{10, 1, 1, 2});
  CHECK(batches[0].images.dtype() == dpx::DType::f32);
  CHECK(batches[0].labels.shape() == Shape{10});
  CHECK(batches[0].labels.dtype() == dpx::DType::i64);
  CHECK(batches[10].images.shape() == Shape{3, 1, 1, 2});
  CHECK(batches[10].step == 10);
  CHECK(labels_of(batches[10]) == std::vector<int64_t>{100, 101, 102});
  CHECK(batches[10].images.data<float>()[5] == -102.f);  // sample 102's second pixel
  CHECK(!keep.next().has_value());                        // stays at the end until start_epoch
  o.drop_last = true;
  DataLoader drop(ds, o);
  CHECK(drop.steps_per_epoch() == 10);
  CHECK(epoch_batches(drop, 0).size() == 10);
}

TEST_CASE("DataLoader: the same batches whatever the number of workers") {
  SyntheticOptions so;
  so.size = 97;
  so.sample_shape = {2, 5, 3};
  so.num_classes = 4;
  so.seed = 11;
  auto ds = std::make_shared<SyntheticDataset>(so);
  for (int world : {1, 2}) {
    std::vector<std::vector<Batch>> runs;
    for (auto [workers, prefetch] : std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {3, 0}, {3, 1}, {2, 9}}) {
      LoaderOptions o;
      o.batch_size = 8;
      o.seed = 5;
      o.world = world;
      o.rank = world - 1;
      o.num_workers = workers;
      o.prefetch = prefetch;
      DataLoader loader(ds, o);
      std::vector<Batch> all;
      for (int64_t epoch : {0, 1}) {
        auto b = epoch_batches(loader, epoch);
        all.insert(all.end(), b.begin(), b.end());
      }
      runs.push_back(std::move(all));
    }
    // Batches dropped as soon as they are read: their buffers are recycled, and must never be
    // overwritten while held (the runs above keep every batch, so recycling cannot hide there).
    LoaderOptions o;
    o.batch_size = 8;
    o.seed = 5;
    o.world = world;
    o.rank = world - 1;
    o.num_workers = 3;
    DataLoader streaming(ds, o);
    size_t k = 0;
    for (int64_t epoch : {0, 1}) {
      streaming.start_epoch(epoch);
      while (auto b = streaming.next()) {
        REQUIRE(k < runs[0].size());
        CHECK(std::memcmp(b->images.raw(), runs[0][k].images.raw(), b->images.nbytes()) == 0);
        ++k;
      }
    }
    CHECK(k == runs[0].size());
    for (size_t r = 1; r < runs.size(); ++r) {
      CAPTURE(world);
      CAPTURE(r);
      REQUIRE(runs[r].size() == runs[0].size());
      for (size_t k = 0; k < runs[0].size(); ++k) {
        const Batch &a = runs[0][k], &b = runs[r][k];
        CHECK(a.epoch == b.epoch);
        CHECK(a.step == b.step);
        REQUIRE(a.images.shape() == b.images.shape());
        CHECK(std::memcmp(a.images.raw(), b.images.raw(), a.images.nbytes()) == 0);
        CHECK(labels_of(a) == labels_of(b));
      }
    }
  }
}

TEST_CASE("DataLoader: ranks get disjoint shards of equal size; the dropped tail changes per epoch") {
  auto ds = std::make_shared<IndexDataset>(103);
  const int world = 4;
  std::vector<std::set<int64_t>> dropped;
  for (int64_t epoch : {0, 1, 2}) {
    std::set<int64_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      LoaderOptions o;
      o.batch_size = 6;
      o.seed = 3;
      o.rank = rank;
      o.world = world;
      o.drop_last = true;
      o.num_workers = rank % 2;
      DataLoader loader(ds, o);
      CHECK(loader.samples_per_rank() == 25);  // 103 / 4; the tail of 3 is dropped
      CHECK(loader.steps_per_epoch() == 4);    // 25 / 6, last partial batch dropped
      std::vector<int64_t> shard = loader.shard(epoch);
      CHECK(shard.size() == 25);
      std::vector<int64_t> got = epoch_labels(loader, epoch);
      CHECK(got == std::vector<int64_t>(shard.begin(), shard.begin() + 24));
      for (int64_t i : shard) CHECK_MESSAGE(seen.insert(i).second, "sample ", i, " in two shards");
    }
    CHECK(seen.size() == 100);
    std::set<int64_t> tail;
    for (int64_t i = 0; i < 103; ++i)
      if (!seen.count(i)) tail.insert(i);
    dropped.push_back(tail);
  }
  CHECK((dropped[0] != dropped[1] || dropped[1] != dropped[2]));
}

TEST_CASE("DataLoader: a new permutation per epoch, reproducible from seed and epoch") {
  auto ds = std::make_shared<IndexDataset>(50);
  LoaderOptions o;
  o.batch_size = 5;
  o.seed = 1;
  DataLoader a(ds, o), b(ds, o);
  std::vector<int64_t> e0 = epoch_labels(a, 0), e1 = epoch_labels(a, 1);
  CHECK(e0 != e1);
  CHECK(epoch_labels(b, 1) == e1);  // epochs can be visited in any order
  CHECK(epoch_labels(b, 0) == e0);
  std::vector<int64_t> sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) CHECK(sorted[i] == i);
  o.seed = 2;
  DataLoader c(ds, o);
  CHECK(epoch_labels(c, 0) != e0);
  o.shuffle = false;
  DataLoader d(ds, o);
  CHECK(epoch_labels(d, 3) == epoch_labels(d, 0));
  CHECK(epoch_labels(d, 0)[49] == 49);
}

TEST_CASE("DataLoader: restarting an epoch midway discards what was prefetched") {
  auto ds = std::make_shared<IndexDataset>(40, 0.0005);
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 3;
  o.prefetch = 6;
  DataLoader loader(ds, o), fresh(ds, o);
  loader.start_epoch(0);
  REQUIRE(loader.next().has_value());
  REQUIRE(loader.next().has_value());
  auto restarted = epoch_batches(loader, 1);
  auto expected = epoch_batches(fresh, 1);
  REQUIRE(restarted.size() == expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    CHECK(restarted[k].epoch == 1);
    CHECK(labels_of(restarted[k]) == labels_of(expected[k]));
  }
}

TEST_CASE("DataLoader: wait_s measures how long next() blocked; load_s the work of a batch") {
  auto slow = std::make_shared<IndexDataset>(24, 0.003);  // 3 ms per sample, 12 ms per batch
  LoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  o.num_workers = 1;
  {
    DataLoader loader(slow, o);  // a consumer faster than the one worker: it waits
    double wait = 0;
    for (const Batch& b : epoch_batches(loader, 0)) {
      CHECK(b.load_s >= 0.012);
      wait += b.wait_s;
    }
    CHECK(wait > 0.03);  // about 6 x 12 ms
  }
  {
    o.num_workers = 2;
    DataLoader loader(slow, o);  // a slow consumer: the batch is ready when it asks
    loader.start_epoch(0);
    REQUIRE(loader.next().has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    auto b = loader.next();
    REQUIRE(b.has_value());
    CHECK(b->wait_s < b->load_s);
  }
  o.num_workers = 0;
  DataLoader inline_loader(slow, o);  // no workers: the caller waits for the whole load
  inline_loader.start_epoch(0);
  auto b = inline_loader.next();
  CHECK(b->wait_s == b->load_s);
  CHECK(b->wait_s >= 0.012);
}

// What a trace draws of the loader: which worker made each batch, and when.
TEST_CASE("DataLoader: each batch says which worker loaded it and when, on the steady clock") {
  auto slow = std::make_shared<IndexDataset>(48, 0.001);
  LoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  for (int workers : {0, 3}) {
    CAPTURE(workers);
    o.num_workers = workers;
    DataLoader loader(slow, o);
    const double before = dpx::now_s();
    std::set<int> seen;
    for (const Batch& b : epoch_batches(loader, 0)) {
      seen.insert(b.worker);
      CHECK(b.load_start_s >= before);
      CHECK(b.load_end_s - b.load_start_s == doctest::Approx(b.load_s).epsilon(1e-6));
      CHECK(b.load_end_s <= dpx::now_s());
      CHECK(b.load_s >= 0.004);  // 4 samples of 1 ms
    }
    if (workers == 0) CHECK(seen == std::set<int>{-1});
    else CHECK((*seen.begin() >= 0 && *seen.rbegin() < workers && !seen.empty()));
  }
}

TEST_CASE("DataLoader: a data set's exception reaches next() for its batch; later batches follow") {
  auto bad = std::make_shared<IndexDataset>(24, 0, /*throw_at=*/13);
  for (int workers : {0, 2}) {
    CAPTURE(workers);
    LoaderOptions o;
    o.batch_size = 4;
    o.shuffle = false;
    o.num_workers = workers;
    DataLoader loader(bad, o);
    loader.start_epoch(0);
    for (int s = 0; s < 3; ++s) CHECK(loader.next()->step == s);
    CHECK(contains(error_of([&] { loader.next(); }), "cannot decode sample 13"));
    auto after = loader.next();
    REQUIRE(after.has_value());
    CHECK(after->step == 4);
  }
}

TEST_CASE("DataLoader: destroying it mid-epoch does not hang") {
  auto slow = std::make_shared<IndexDataset>(400, 0.002);  // 16 ms per batch of 8
  LoaderOptions o;
  o.batch_size = 8;
  o.num_workers = 3;
  o.prefetch = 6;
  dpx::Stopwatch sw;
  {
    DataLoader loader(slow, o);
    loader.start_epoch(0);
    REQUIRE(loader.next().has_value());
  }
  { DataLoader never_started(slow, o); }
  {
    DataLoader started_only(slow, o);
    started_only.start_epoch(2);
  }
  CHECK(sw.elapsed_s() < 1.0);  // each waits for at most the batches in flight
}

TEST_CASE("DataLoader: configuration errors say what to change") {
  auto ds = std::make_shared<IndexDataset>(10);
  LoaderOptions o;
  o.batch_size = 3;
  o.world = 4;
  std::string msg;
  try {
    DataLoader loader(ds, o);
  } catch (const dpx::UsageError& e) {
    msg = e.what();
  }
  CHECK(contains(msg, "has 10 samples: over 4 rank(s) that is 2 per rank, fewer than one batch of 3"));
  CHECK(contains(msg, "pass a smaller --batch-size (at most 2 per rank)"));
  o.world = 2;
  o.rank = 2;
  CHECK(contains(error_of([&] { DataLoader(ds, o); }), "rank 2 is not in [0, world = 2)"));
  o.rank = 0;
  o.batch_size = 0;
  CHECK(contains(error_of([&] { DataLoader(ds, o); }), "batch size must be at least 1"));
  o.batch_size = 2;
  DataLoader loader(ds, o);
  CHECK(contains(error_of([&] { loader.next(); }), "before start_epoch"));
}

TEST_CASE("SyntheticDataset: sample i depends only on the seed and i") {
  SyntheticOptions so;
  so.size = 1000;
  so.sample_shape = {3, 7, 5};
  so.num_classes = 6;
  so.seed = 42;
  SyntheticDataset a(so), b(so);
  so.size = 10;
  SyntheticDataset small(so);
  so.seed = 43;
  SyntheticDataset other(so);
  const size_t m = 3 * 7 * 5;
  std::vector<float> x(m), y(m), z(m);
  int64_t lx, ly, lz;
  a.get(5, x.data(), &lx);
  b.get(5, y.data(), &ly);
  small.get(5, z.data(), &lz);
  CHECK(std::memcmp(x.data(), y.data(), m * sizeof(float)) == 0);
  CHECK(std::memcmp(x.data(), z.data(), m * sizeof(float)) == 0);
  CHECK(lx == 5 % 6);
  other.get(5, z.data(), &lz);
  CHECK(x != z);
  a.get(11, y.data(), &ly);  // the same class, another sample: same pattern, other noise
  CHECK(ly == lx);
  CHECK(x != y);
  for (int64_t i = 0; i < 1000; i += 37) {
    a.get(i, x.data(), &lx);
    for (float v : x) CHECK((v >= 0.f && v <= 1.f));
  }
  CHECK(contains(error_of([] { SyntheticDataset({.size = 0}); }), "size must be at least 1"));
}

TEST_CASE("SyntheticDataset: learnable, a softmax regression lowers its loss well below chance") {
  SyntheticOptions so;
  so.size = 2000;
  so.sample_shape = {1, 8, 8};
  so.num_classes = 10;
  so.seed = 7;
  auto ds = std::make_shared<SyntheticDataset>(so);
  const int K = 10, D = 64;
  std::vector<float> w(K * D, 0.f), bias(K, 0.f);
  LoaderOptions o;
  o.batch_size = 50;
  o.num_workers = 2;
  DataLoader loader(ds, o);
  auto loss_of = [&](const Batch& b, bool update) {
    const int64_t B = b.labels.numel();
    const float* x = b.images.data<float>();
    const int64_t* y = b.labels.data<int64_t>();
    std::vector<float> gw(K * D, 0.f), gb(K, 0.f);
    double loss = 0;
    for (int64_t n = 0; n < B; ++n) {
      float logits[10], mx = -1e30f, z = 0;
      for (int k = 0; k < K; ++k) {
        logits[k] = bias[k];
        for (int d = 0; d < D; ++d) logits[k] += w[k * D + d] * (x[n * D + d] - 0.5f);
        mx = std::max(mx, logits[k]);
      }
      for (int k = 0; k < K; ++k) z += std::exp(logits[k] - mx);
      loss += std::log(z) + mx - logits[y[n]];
      for (int k = 0; k < K; ++k) {
        float g = std::exp(logits[k] - mx) / z - (k == y[n] ? 1.f : 0.f);
        gb[k] += g / static_cast<float>(B);
        for (int d = 0; d < D; ++d) gw[k * D + d] += g * (x[n * D + d] - 0.5f) / static_cast<float>(B);
      }
    }
    if (update) {
      for (int i = 0; i < K * D; ++i) w[i] -= 0.5f * gw[i];
      for (int k = 0; k < K; ++k) bias[k] -= 0.5f * gb[k];
    }
    return loss / static_cast<double>(B);
  };
  double first = 0, last = 0;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    loader.start_epoch(epoch);
    while (auto b = loader.next()) {
      double l = loss_of(*b, true);
      if (epoch == 0 && b->step == 0) first = l;
      last = l;
    }
  }
  CHECK(first == doctest::Approx(std::log(10.0)).epsilon(0.01));  // zero weights: chance
  CHECK(last < 0.5);
}
