// dpx predict's model: the all-reduce cost on a network, DDP's bucket overlap, strong and weak
// scaling, and the rank lists it reads.
#include <doctest/doctest.h>

#include "analysis/cost_model.hpp"
#include "analysis/predict.hpp"
#include "core/error.hpp"

using namespace dpx;
using namespace dpx::analysis;

namespace {

Network ring_net() {
  Network n;
  n.alpha_s = 10e-6;
  n.beta_s_per_byte = 1e-9;  // 1 GB/s
  n.gamma_s_per_byte = 0;
  n.algo = "ring";
  return n;
}

}  // namespace

TEST_CASE("an all-reduce costs its algorithm's terms on the network; hier splits inside and across nodes") {
  Network net = ring_net();
  // ring, 4 ranks, 1 MB: 2*3 alpha + 2*3/4 * 1e6 beta
  CHECK(all_reduce_s(net, 1e6, 4) == doctest::Approx(6 * 10e-6 + 1.5e6 * 1e-9));
  CHECK(all_reduce_s(net, 1e6, 1) == 0);
  net.algo = "hier";
  net.ranks_per_node = 4;
  net.intra_alpha_s = 1e-6;
  net.intra_beta_s_per_byte = 0.1e-9;
  // 8 ranks = 2 nodes of 4: tree inside (2*2 steps of the whole buffer), ring of 2 leaders across
  CHECK(all_reduce_s(net, 1e6, 8) == doctest::Approx(4 * 1e-6 + 4e6 * 0.1e-9 + 2 * 10e-6 + 1e6 * 1e-9));
  net.algo = "bogus";
  CHECK_THROWS_AS(all_reduce_s(net, 1e6, 8), UsageError);
}

TEST_CASE("exposed communication: buckets start when ready and after the one before") {
  const Network net = ring_net();
  const double t = all_reduce_s(net, 1e6, 2);  // one bucket's all-reduce: 2 alpha + 1e6 beta = 1.02 ms
  // Two buckets ready at 50 % and 100 % of a 10 ms backward: the first hides, the second is exposed.
  std::vector<BucketPlan> b = {{1e6, 0.5}, {1e6, 1.0}};
  double total = 0;
  CHECK(exposed_comm_s(b, net, 2, 10e-3, true, &total) == doctest::Approx(t));
  CHECK(total == doctest::Approx(2 * t));
  // Without overlap both run after backward.
  CHECK(exposed_comm_s(b, net, 2, 10e-3, false) == doctest::Approx(2 * t));
  // A backward shorter than the first all-reduce: the second queues behind the first.
  std::vector<BucketPlan> early = {{1e6, 0.0}, {1e6, 0.1}};
  CHECK(exposed_comm_s(early, net, 2, 0.5e-3, true) == doctest::Approx(2 * t - 0.5e-3));
  CHECK(exposed_comm_s({}, net, 2, 1, true) == 0);
}

TEST_CASE("predictions: weak and strong scaling, impossible splits, speedup against one rank") {
  ComputeModel c;
  c.batch_lo = 8, c.batch_hi = 32;
  c.lo = {0.001, 0.010, 0.020, 0.002};  // load, forward, backward, optimizer at batch 8
  c.hi = {0.004, 0.040, 0.080, 0.002};  // at batch 32
  CHECK(c.at(16).forward == doctest::Approx(0.020));
  CHECK(c.at(64).backward == doctest::Approx(0.160));  // extrapolated on the line
  // A busy machine measured the smaller batch slower: the line does not fall, it stays flat.
  ComputeModel noisy = c;
  noisy.lo.forward = 0.060;
  CHECK(noisy.at(64).forward == doctest::Approx(0.040));
  CHECK(noisy.at(16).forward == doctest::Approx(0.040));
  CHECK(noisy.at(64).backward == doctest::Approx(0.160));
  const std::vector<BucketPlan> buckets = {{4e6, 1.0}};
  const Network net = ring_net();
  PredictOptions weak;
  weak.scaling = "weak";
  auto rows = predict(c, buckets, net, weak, {32}, {1, 4});
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].speedup == doctest::Approx(1));
  CHECK(rows[0].exposed_s == 0);
  const double ar = all_reduce_s(net, 4e6, 4);
  CHECK(rows[1].exposed_s == doctest::Approx(ar));  // the one bucket is ready only at the end
  CHECK(rows[1].step_s == doctest::Approx(0.126 + ar));
  CHECK(rows[1].images_per_s == doctest::Approx(4 * 32 / (0.126 + ar)));
  CHECK(rows[1].efficiency == doctest::Approx(0.126 / (0.126 + ar)));

  PredictOptions strong;
  strong.scaling = "strong";
  rows = predict(c, buckets, net, strong, {32}, {1, 3, 4, 64});
  REQUIRE(rows.size() == 4);
  CHECK_FALSE(rows[1].possible);  // 32 / 3
  CHECK(rows[2].rank_batch == 8);
  CHECK(rows[2].compute.total() == doctest::Approx(0.033));
  CHECK(rows[2].speedup == doctest::Approx(0.126 / (0.033 + all_reduce_s(net, 4e6, 4))));
  CHECK_FALSE(rows[3].possible);  // fewer images than ranks
  CHECK(rows[3].why == "fewer images than ranks");

  PredictOptions faster = weak;
  faster.compute_scale = 10;
  rows = predict(c, buckets, net, faster, {32}, {4});
  CHECK(rows[0].step_s == doctest::Approx(0.0126 + ar));
}

TEST_CASE("rank lists") {
  CHECK(parse_rank_list("1..1024", "--ranks") == std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024});
  CHECK(parse_rank_list("3..20", "--ranks") == std::vector<int>{3, 4, 8, 16, 20});
  CHECK(parse_rank_list("8,2,5", "--ranks") == std::vector<int>{2, 5, 8});
  CHECK_THROWS_WITH_AS(parse_rank_list("8,2,2,5", "--ranks"), doctest::Contains("2 is given twice"), UsageError);
  CHECK_THROWS_WITH_AS(parse_rank_list("0..8", "--ranks"), doctest::Contains("--ranks"), UsageError);
  CHECK_THROWS_WITH_AS(parse_rank_list("8..2", "--ranks"), doctest::Contains("backwards"), UsageError);
  CHECK_THROWS_AS(parse_rank_list("two", "--ranks"), UsageError);
  CHECK_THROWS_AS(parse_rank_list("", "--ranks"), UsageError);
}
