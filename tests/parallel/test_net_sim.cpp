// The network you can dial in (--net-sim, parallel/comm/net_sim.hpp): RATE,LATENCY parses with units
// and refuses what it cannot read, naming the flag; exchanges, ring all-reduces and DDP's
// gradient all-reduces under it take the alpha-beta model's time: never less (the wait is real),
// and at most 50 % + 10 ms more (the copies and reductions themselves, on a shared 2-core machine;
// twice that under the sanitizers, whose instrumented copies are several times slower).
#include <doctest/doctest.h>

#include <sstream>
#include <vector>

#include "core/clock.hpp"
#include "parallel/train/reducer.hpp"
#include "parallel/comm/net_sim.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "parallel/train/trainer.hpp"
#include "tests/common/errors.hpp"
#include "tests/parallel/small_job.hpp"
#include "tests/parallel/test_collective_util.hpp"
#include "zoo/registry.hpp"

using namespace dpx;
using namespace dpx::parallel;
using dpx::testing::contains;
using dpx::testing::error_of;

namespace {

#if defined(DPX_SANITIZE)  // the code under test is instrumented (this file is not: tests/CMakeLists.txt)
constexpr double kSlack = 2;
#else
constexpr double kSlack = 1;
#endif

// measured within [model, (1 + 0.5 slack) model + slack * 10 ms].
void check_model(const char* what, double measured_s, double model_s) {
  INFO(what << ": measured " << measured_s * 1e3 << " ms, model " << model_s * 1e3 << " ms");
  CHECK(measured_s >= model_s);
  CHECK(measured_s <= (1 + 0.5 * kSlack) * model_s + kSlack * 0.010);
}

}  // namespace

TEST_CASE("--net-sim RATE,LATENCY: units of bits and bytes per second and of time") {
  NetSim n = parse_net_sim("10gbit,5us", "--net-sim");
  CHECK(n.bytes_per_s == doctest::Approx(1.25e9));
  CHECK(n.latency_s == doctest::Approx(5e-6));
  n = parse_net_sim("1GB,50us", "--net-sim");
  CHECK(n.bytes_per_s == doctest::Approx(1e9));
  CHECK(n.latency_s == doctest::Approx(5e-5));
  n = parse_net_sim("100mbit,1.5ms", "--net-sim");
  CHECK(n.bytes_per_s == doctest::Approx(12.5e6));
  CHECK(n.latency_s == doctest::Approx(1.5e-3));
  CHECK(n.message_s(12500000) == doctest::Approx(1.0015));
  CHECK_FALSE(parse_net_sim("", "--net-sim").enabled());
  CHECK_FALSE(parse_net_sim("off", "--net-sim").enabled());
}

TEST_CASE("--net-sim refuses what it cannot read, naming the flag and what to write") {
  const std::pair<const char*, const char*> bad[] = {
      {"10gbit", "write RATE,LATENCY"},
      {"10gbit,5us,1", "write RATE,LATENCY"},
      {"10,5us", "needs one of the units bit, kbit, mbit, gbit, tbit, B, kB, MB, GB, TB"},
      {"10gbps,5us", "the rate '10gbps' needs one of the units"},
      {"10gbit,5", "the latency '5' needs one of the units ns, us, ms, s"},
      {"gbit,5us", "does not start with a number"},
      {"0gbit,5us", "must be a positive number"},
      {"-1gbit,5us", "does not start with a number"},
      {"10gbit,0us", "the latency must be a positive number"},
  };
  for (const auto& [text, expected] : bad) {
    CAPTURE(text);
    const std::string msg = error_of([&] { parse_net_sim(text, "--net-sim"); });
    CHECK_MESSAGE(contains(msg, expected), msg);
    CHECK(contains(msg, "--net-sim"));
  }
}

TEST_CASE("under --net-sim an exchange and a ring all-reduce take the alpha-beta model's time") {
  dpx::testing::Watchdog dog(60, "net-sim timings");
  RankOptions ro;
  ro.net_sim = parse_net_sim("40MB,1ms", "--net-sim");  // 25 ms per MB: slow beside the copies
  const NetSim& net = ro.net_sim;
  for (int k : {2, 3}) {
    CAPTURE(k);
    const size_t count = 1 << 20;  // 4 MB of f32
    std::vector<double> allreduce_s(static_cast<size_t>(k)), send_s(static_cast<size_t>(k));
    run_ranks(k, [&](Communicator& comm) {
      std::vector<float> data(count, 1.f);
      comm.barrier();
      double t = now_s();
      comm.all_reduce(data.data(), data.data(), count, DType::f32, ReduceOp::sum);
      allreduce_s[static_cast<size_t>(comm.rank())] = now_s() - t;
      CHECK(data[count - 1] == static_cast<float>(k));
      // One message of 1 MB from rank 0 to rank 1.
      comm.barrier();
      t = now_s();
      if (comm.rank() == 0) comm.send(data.data(), count / 4, DType::f32, 1);
      if (comm.rank() == 1) comm.recv(data.data(), count / 4, DType::f32, 0);
      send_s[static_cast<size_t>(comm.rank())] = now_s() - t;
    }, ro);
    // Ring: reduce-scatter then all-gather, 2 (k - 1) steps of count / k elements.
    const double ring = 2.0 * (k - 1) * net.message_s(count * 4 / static_cast<size_t>(k));
    for (int r = 0; r < k; ++r) check_model("ring all-reduce", allreduce_s[static_cast<size_t>(r)], ring);
    check_model("send", send_s[0], net.message_s(count));
    check_model("recv", send_s[1], net.message_s(count));
  }
}

TEST_CASE("DDP under --net-sim: each update's communication is its buckets' ring all-reduces on that network") {
  dpx::testing::Watchdog dog(120, "DDP under net-sim");
  const char* net_text = "2MB,2ms";  // slow beside the communication thread's wake-ups on a loaded machine
  const NetSim net = parse_net_sim(net_text, "--net-sim");
  parallel::TrainOptions o = dpx::testing::small_job("cpu:2", ParallelMode::ddp);
  o.max_steps = 6;
  o.net_sim = net_text;
  std::ostringstream log;
  const TrainReport report = train(o, log);
  // The model: every bucket's ring all-reduce, 2 (k - 1) messages of bucket bytes / k each.
  zoo::ModelOptions mo;
  mo.in_channels = o.channels;
  mo.image_size = o.image_size;
  nn::Model model(zoo::build_model(o.model, mo));
  ReducerOptions d;
  d.bucket_cap_bytes = static_cast<size_t>(o.bucket_mb * 1024 * 1024);
  double model_s = 0;
  for (const Bucket& b : plan_buckets(model, d)) model_s += 2.0 * net.message_s(static_cast<size_t>(b.numel) * 4 / 2);
  REQUIRE(report.steps.size() == 12);
  for (const StepRecord& s : report.steps) {
    CAPTURE(s.rank);
    CAPTURE(s.global_step);
    check_model("comm_total", s.times[Phase::comm_total], model_s);
    // What backward could hide of it, at most: exposed >= model - backward.
    CHECK(s.times[Phase::comm_exposed] >= model_s - s.times[Phase::backward]);
  }
  std::ostringstream log2;
  o.net_sim = "";
  const TrainReport fast = train(o, log2);
  CHECK(fast.steps.back().times[Phase::comm_total] < model_s);  // without it, this machine is faster
}

TEST_CASE("--net-sim is refused where it would do nothing") {
  parallel::TrainOptions o = dpx::testing::small_job("cpu:2", ParallelMode::dp);
  o.net_sim = "1gbit,1ms";
  CHECK_THROWS_WITH_AS(o.validate(), doctest::Contains("--net-sim simulates the network under DDP's all-reduces"),
                       UsageError);
  o = dpx::testing::small_job("cpu:2", ParallelMode::ddp);
  o.net_sim = "1gbit";
  CHECK_THROWS_WITH_AS(o.validate(), doctest::Contains("--net-sim '1gbit': write RATE,LATENCY"), UsageError);
  o.net_sim = "1mbit,1ms";  // a 25 MiB bucket: 210 s a message
  o.comm_timeout_s = 60;
  CHECK_THROWS_WITH_AS(o.validate(), doctest::Contains("one exchange of a 25 MiB bucket would take 209.716 s, beyond --comm-timeout 60 s"),
                       UsageError);
  o.comm_timeout_s = 300;
  CHECK_NOTHROW(o.validate());
}
