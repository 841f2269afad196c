// The Reducer (parallel/train/reducer.hpp) as the GPU backends drive it, on the CPU: a fence that
// holds each bucket's data back, as a device that has not written it yet, until the all-reduce
// waits for it (after a delay of each rank and bucket's own); all-reduces whose results land only
// after the call has finished, the later buckets first; gradients ready in each rank's own order.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "kernels/ops.hpp"
#include "layers/layers.hpp"
#include "layers/optim.hpp"
#include "parallel/comm/threads/thread_ranks.hpp"
#include "parallel/train/reducer.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"
#include "zoo/registry.hpp"

using namespace dpx;
using namespace dpx::parallel;
using dpx::testing::check_close;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Host memory moved as the threads backend moves it.
class HostTransport final : public ThreadRankTransport {
 public:
  using ThreadRankTransport::ThreadRankTransport;
  std::string_view name() const override { return "test"; }
  bool accepts(Device device) const override { return device.is_cpu(); }

 protected:
  void deliver(const Exchange& x, const void* incoming, const void*) override {
    if (x.reduce_with)
      reduce_into(x.recv, x.reduce_with, incoming, x.recv_bytes / dtype_size(x.dtype), x.dtype, x.op);
    else if (x.recv_bytes > 0)
      std::memcpy(x.recv, incoming, x.recv_bytes);
  }
};

// A device that writes late: what a bucket's all-reduce reads is NaN from mark() until wait(),
// which gives the true bytes back after a delay of the rank's and the bucket's own.
class HeldBackFence final : public GradFence {
 public:
  explicit HeldBackFence(int rank) : rank_(rank) {}
  void resize(size_t buckets) override { held_.assign(buckets, {}); }
  void mark(size_t bucket, const Tensor& data) override {
    Held& h = held_.at(bucket);
    h.data = data;
    h.bytes.resize(data.nbytes());
    std::memcpy(h.bytes.data(), data.raw(), data.nbytes());
    std::memset(data.raw(), 0xff, data.nbytes());  // NaN in f32, f16 and bf16
  }
  void wait(size_t bucket) override {
    sleep_ms(static_cast<int>((bucket + static_cast<size_t>(rank_)) % 3));
    Held& h = held_.at(bucket);
    std::memcpy(h.data.raw(), h.bytes.data(), h.bytes.size());
    ++waits;
  }
  int waits = 0;

 private:
  struct Held {
    Tensor data;
    std::vector<std::byte> bytes;
  };
  const int rank_;
  std::vector<Held> held_;
};

// All-reduces whose results land late: each runs into a buffer of its own, and its result reaches
// the caller's buffer only when a wait() asks for it; then every call started so far lands, the
// last started first.
class LateCommunicator final : public Communicator {
 public:
  using Communicator::Communicator;
  int landed = 0;

 protected:
  Work start(const CollectiveArgs& args, const CommCall& call, Ready ready) override {
    auto late = std::make_shared<Late>(*this);
    late->result.resize(args.count * dtype_size(args.dtype));
    late->recv = args.recv;
    CollectiveArgs mine = args;
    mine.recv = late->result.data();  // out of place: args.send is read, args.recv left alone
    late->inner = Communicator::start(mine, call, std::move(ready));
    std::lock_guard<std::mutex> lock(mu_);
    started_.push_back(late);
    return Work(late);
  }

 private:
  struct Late final : Work::State {
    explicit Late(LateCommunicator& c) : comm(c) {}
    void wait() override { comm.land_all(); }
    bool done() const override { return is_landed; }
    double seconds() const override { return inner.seconds(); }
    uint64_t bytes_sent() const override { return inner.bytes_sent(); }
    LateCommunicator& comm;
    Work inner;
    std::vector<std::byte> result;
    void* recv = nullptr;
    bool is_landed = false;
  };

  void land_all() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = started_.rbegin(); it != started_.rend(); ++it) {
      Late& l = **it;
      l.inner.wait();
      std::memcpy(l.recv, l.result.data(), l.result.size());
      l.is_landed = true;
      ++landed;
    }
    started_.clear();
  }

  std::mutex mu_;
  std::vector<std::shared_ptr<Late>> started_;
};

// Runs body(comm, rank) on k thread ranks, each with a LateCommunicator of its own over its transport.
template <typename Body>
void run_late_ranks(int k, Body body) {
  std::vector<ThreadRankTransport*> transports(static_cast<size_t>(k));
  run_thread_ranks(
      k,
      [&](Communicator&, Communicator& comm) {
        LateCommunicator late(*transports[static_cast<size_t>(comm.rank())]);
        body(late, comm.rank());
      },
      RankOptions{},
      [&](ThreadWorld& world, int rank) -> std::unique_ptr<ThreadRankTransport> {
        auto t = std::make_unique<HostTransport>(world, rank);
        transports[static_cast<size_t>(rank)] = t.get();
        return t;
      },
      "test");
}

nn::Model small_mlp() {
  zoo::ModelOptions mo;
  mo.in_channels = 1;
  mo.image_size = 6;
  return nn::Model(zoo::build_model("mlp", mo));
}

// Rank r's gradient i, in [-1, 1): exact in every dtype's arithmetic, so the expected mean is too.
float gradient_of(int rank, size_t i) {
  return static_cast<float>((i * 7919 + static_cast<size_t>(rank) * 104729) % 2003) / 1001.5f - 1.f;
}

}  // namespace

TEST_CASE("the Reducer gives every rank the ranks' mean gradients, whatever their order, with late data and results") {
  const nn::Model initial = small_mlp();
  for (int k : {2, 3}) {
    for (size_t cap : {size_t{0}, size_t{2048}, size_t{25} << 20}) {
      for (bool overlap : {true, false}) {
        for (DType wire : {DType::f32, DType::bf16, DType::f16}) {
          CAPTURE(k);
          CAPTURE(cap);
          CAPTURE(overlap);
          CAPTURE(dtype_name(wire));
          std::vector<std::vector<float>> got(static_cast<size_t>(k));
          std::vector<uint64_t> sent(static_cast<size_t>(k));
          size_t buckets = 0;
          run_late_ranks(k, [&](LateCommunicator& comm, int rank) {
            nn::Model model = initial.clone(Device::cpu());
            auto fence = std::make_unique<HeldBackFence>(rank);
            HeldBackFence& held = *fence;
            Reducer reducer(comm, model,
                            {.bucket_cap_bytes = cap, .first_bucket_bytes = cap / 2, .overlap = overlap,
                             .algo = Algorithm::ring, .grad_dtype = wire},
                            Context::cpu(1), std::move(fence));
            Context ctx = Context::cpu(1);
            DeviceEnv env;  // the host: no device phases
            for (int step = 0; step < 2; ++step) {  // the second step reuses the buckets and their events
              float* g = model.flat_grads().data<float>();
              for (size_t i = 0; i < static_cast<size_t>(model.flat_grads().numel()); ++i) g[i] = gradient_of(rank, i);
              // Every rank reports its gradients in an order of its own: the buckets must still
              // start in index order, or the ranks' all-reduces would not meet.
              std::vector<const nn::Parameter*> params;
              for (const nn::ParamSlot& s : model.slots()) params.push_back(s.param);
              std::shuffle(params.begin(), params.end(), std::mt19937(static_cast<unsigned>(7 * rank + step)));
              reducer.begin_step(true);
              for (const nn::Parameter* p : params) reducer.grad_ready(*p);
              StepPhases phases(env);
              reducer.finish(ctx, phases);
              (void)phases.finish();
            }
            CHECK(held.waits == 2 * static_cast<int>(reducer.buckets().size()));
            CHECK(comm.landed == 2 * static_cast<int>(reducer.buckets().size()));
            got[static_cast<size_t>(rank)] = model.flat_grads().to_vector();
            sent[static_cast<size_t>(rank)] = reducer.take_sent_bytes();
            buckets = reducer.buckets().size();
          });
          std::vector<float> mean(got[0].size());
          for (size_t i = 0; i < mean.size(); ++i) {
            double s = 0;
            for (int r = 0; r < k; ++r) s += gradient_of(r, i);
            mean[i] = static_cast<float>(s / k);
          }
          // Each value is rounded once when narrowed and once per sum (k - 1): within k units of
          // the wire type, 2^-8 for bf16 and 2^-11 for fp16, relative to max(|x|, 1).
          const double tol = wire == DType::f32 ? 1e-6 : k * std::ldexp(1.0, wire == DType::bf16 ? -8 : -11);
          for (int r = 0; r < k; ++r) {
            CAPTURE(r);
            check_close(got[static_cast<size_t>(r)], mean, tol, /*floor=*/1.0);
            CHECK(got[static_cast<size_t>(r)] == got[0]);  // every rank the same bits
            CHECK(sent[static_cast<size_t>(r)] > 0);
          }
          if (cap == 0) CHECK(buckets == initial.slots().size());  // one per tensor
          if (cap == 2048) CHECK(buckets > 2);
          if (cap > 2048) CHECK(buckets == 1);
        }
      }
    }
  }
}

TEST_CASE("DDP steps through the Reducer with late data and results reproduce one replica on the global batch") {
  const nn::Model initial = small_mlp();
  const int64_t batch = 12;
  const Tensor images = testing::uniform({batch, 1, 6, 6}, 5);
  const Tensor labels = testing::labels_from({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1});
  const ops::SgdParams sgd{.lr = 0.1f, .momentum = 0.9f};
  auto train = [&](nn::Model& model, Context& ctx, const Tensor& x, const Tensor& y, GradSync& sync) {
    nn::SGD optimizer(model, sgd);
    nn::CrossEntropyLoss loss;
    DeviceEnv env;
    for (int step = 0; step < 4; ++step) {
      StepPhases phases(env);
      sync.begin_step(true);
      loss.forward(ctx, model.forward(ctx, x), y);
      model.backward(ctx, loss.backward(ctx));
      sync.finish(ctx, phases);
      (void)phases.finish();
      optimizer.step(ctx);
      model.zero_grad(ctx);
    }
  };
  nn::Model single = initial.clone(Device::cpu());
  Context one = Context::cpu(1);
  NoSync none;
  train(single, one, images, labels, none);
  for (int k : {2, 3}) {
    for (DType wire : {DType::f32, DType::bf16}) {
      CAPTURE(k);
      CAPTURE(dtype_name(wire));
      std::vector<std::vector<float>> weights(static_cast<size_t>(k));
      run_late_ranks(k, [&](LateCommunicator& comm, int rank) {
        nn::Model model = initial.clone(Device::cpu());
        const int64_t share = batch / k;
        Context ctx = Context::cpu(1);
        Reducer reducer(comm, model,
                        {.bucket_cap_bytes = 4096, .first_bucket_bytes = 1024, .algo = Algorithm::ring, .grad_dtype = wire},
                        ctx, std::make_unique<HeldBackFence>(rank));
        const Tensor x = images.slice(rank * share, (rank + 1) * share), y = labels.slice(rank * share, (rank + 1) * share);
        train(model, ctx, x, y, reducer);
        weights[static_cast<size_t>(rank)] = model.flat_params().to_vector();
      });
      for (int r = 0; r < k; ++r) {
        CAPTURE(r);
        // bf16 rounds each bucket twice per step (narrowed, summed): the weights move within 2^-6.
        check_close(weights[static_cast<size_t>(r)], single.flat_params().to_vector(),
                    wire == DType::f32 ? 1e-5 : std::ldexp(1.0, -6), /*floor=*/1e-2);
        CHECK(weights[static_cast<size_t>(r)] == weights[0]);
      }
    }
  }
}
