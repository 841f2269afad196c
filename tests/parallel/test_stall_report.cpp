// The stall report's text: which collective, who reached it, and what every other rank does —
// busy, in another collective, silent, gone — each with the advice that fits.
#include <doctest/doctest.h>

#include "parallel/runtime/stall_report.hpp"

using namespace dpx;
using namespace dpx::parallel;

TEST_CASE("rank lists and calls read as a person writes them") {
  CHECK(rank_list({}) == "");
  CHECK(rank_list({3}) == "3");
  CHECK(rank_list({0, 1}) == "0, 1");
  CHECK(rank_list({0, 1, 2, 5, 7, 8, 9}) == "0-2, 5, 7-9");
  CommCall c;
  c.kind = Collective::all_reduce;
  c.seq = 57;
  c.bytes = 25u << 20;
  c.dtype = DType::f32;
  c.algo = Algorithm::ring;
  CHECK(describe_call(c) == "all_reduce #57 (25.0 MiB of f32, ring)");
  c.kind = Collective::broadcast;
  c.root = 2;
  c.bytes = 1536;
  c.algo = Algorithm::mpi;
  CHECK(describe_call(c) == "broadcast #57 (1.5 KiB of f32, mpi, root 2)");
  c.kind = Collective::barrier;
  CHECK(describe_call(c) == "barrier #57");
  c.kind = Collective::recv;
  c.peer = 3;
  c.bytes = 4;
  CHECK(describe_call(c) == "recv from rank 3 (4 B)");
  c.kind = Collective::gather;  // the patterns: bytes are all the blocks, as for all_gather
  c.peer = -1;
  c.root = 1;
  c.bytes = 3 << 20;
  c.algo = Algorithm::rhd;
  CHECK(describe_call(c) == "gather #57 (3.0 MiB of f32, rhd, root 1)");
  c.kind = Collective::sendrecv;
  c.root = -1;
  c.algo = Algorithm::ring;
  CHECK(describe_call(c) == "sendrecv #57 (3.0 MiB of f32, ring)");
}

TEST_CASE("a stall report names the reached ranks and every other rank's state, with advice") {
  StallPoint at;
  at.rank = 0;
  at.call.kind = Collective::all_reduce;
  at.call.seq = 12;
  at.call.bytes = 4096;
  at.call.dtype = DType::f32;
  at.comm = "world";
  at.waited_s = 300.2;
  at.timeout_s = 300;
  at.waiting_for = 1;
  std::vector<RankStatus> ranks(6);
  for (int q = 0; q < 6; ++q) ranks[q].rank = q;
  ranks[0].state = ranks[2].state = RankStatus::State::in_call;
  ranks[0].call = ranks[2].call = at.call;
  ranks[0].comm = ranks[2].comm = "world";
  ranks[1].state = RankStatus::State::busy;
  ranks[1].for_s = 301;
  ranks[1].activity = "training: epoch 1 step 12";
  ranks[1].pid = 42;
  ranks[1].host = "node-a";
  ranks[3].state = RankStatus::State::in_call;  // called something else with the same number
  ranks[3].call = at.call;
  ranks[3].call.kind = Collective::broadcast;
  ranks[3].comm = "world";
  ranks[4].state = RankStatus::State::no_answer;
  ranks[5].state = RankStatus::State::gone;
  const std::string report = stall_report(at, ranks);
  CAPTURE(report);
  CHECK(report.rfind("stall: rank 0 has waited 300.2 s (--comm-timeout 300.0 s) in all_reduce #12 (4.0 KiB of f32, "
                     "ring) on the world communicator, for rank 1\n", 0) == 0);
  CHECK(report.find("  reached all_reduce #12 (4.0 KiB of f32, ring): ranks 0, 2\n") != std::string::npos);
  CHECK(report.find("    rank 1 (pid 42 on node-a): busy outside communication for 301.0 s [last said: training: "
                    "epoch 1 step 12]\n") != std::string::npos);
  CHECK(report.find("    rank 3: in broadcast #12 (4.0 KiB of f32, ring) on the world communicator, for 0.0 s (a "
                    "different collective with the same number)") != std::string::npos);
  CHECK(report.find("    rank 4: did not answer: hung, stopped, or unreachable") != std::string::npos);
  CHECK(report.find("    rank 5: gone: its process no longer exists") != std::string::npos);
  CHECK(report.find("  rank 5 vanished") != std::string::npos);
  CHECK(report.find("  rank 4 did not answer: a hang") != std::string::npos);
  CHECK(report.find("  rank 3 waits in other collectives") != std::string::npos);
  CHECK(report.find("  rank 1 is still computing") != std::string::npos);
  CHECK(report.back() != '\n');
}
