// The MPI job's start-up, under mpirun: the launcher's variables agree with MPI, the thread
// level is MPI_THREAD_MULTIPLE, clocks of processes on one machine align to within microseconds,
// every rank's step records reach rank 0, and the start-up agreement names a differing option or a
// failed rank alike on every rank.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "mpi_test_group.hpp"
#include "parallel/comm/gather.hpp"
#include "parallel/runtime/clock_sync.hpp"
#include "parallel/runtime/launcher_env.hpp"
#include "parallel/comm/mpi/mpi_transport.hpp"
#include "parallel/comm/mpi/mpi_util.hpp"
#include "parallel/runtime/watchdog.hpp"
#include "parallel/train/trainer.hpp"

using namespace dpx;
using namespace dpx::parallel;
using testing::mpi_group;

TEST_CASE("the launch: the launcher's variables agree with MPI, MPI_THREAD_MULTIPLE, one host, every rank's pid") {
  const LaunchInfo& info = mpi_group->info();
  CHECK(info.backend == "mpi");
  CHECK(info.thread_level == "MPI_THREAD_MULTIPLE");
#ifdef OPEN_MPI
  CHECK(info.launcher == "mpirun (Open MPI)");
#else  // MPICH's mpiexec (hydra): PMI_RANK and PMI_SIZE, MPI_LOCALRANKID and MPI_LOCALNRANKS
  CHECK(info.launcher == "PMI (MPICH's mpiexec)");
  bool local_rank_seen = false;
  for (const auto& [name, value] : info.launcher_env) local_rank_seen = local_rank_seen || name == "MPI_LOCALRANKID";
  CHECK(local_rank_seen);
#endif
  CHECK(info.ranks == mpi_group->size());
  CHECK(info.nodes == 1);
  REQUIRE(info.pids.size() == static_cast<size_t>(mpi_group->size()));
  CHECK(info.pids[static_cast<size_t>(mpi_group->rank())] == static_cast<int>(getpid()));
  MpiPlace place;
  place.rank = mpi_group->rank();
  place.size = mpi_group->size();
  place.local_rank = info.local_rank[static_cast<size_t>(place.rank)];
  place.local_size = mpi_group->size();
  CHECK(launcher_mismatches(process_env(), place, "pmix").empty());
  place.rank = (place.rank + 1) % place.size;  // what a launcher/library mix-up looks like
  const auto wrong = launcher_mismatches(process_env(), place, "pmix");
  REQUIRE(!wrong.empty());
#ifdef OPEN_MPI
  CHECK(wrong.front().find("OMPI_COMM_WORLD_RANK=") == 0);
#else
  CHECK(wrong.front().find("PMI_RANK=") == 0);
#endif
}

TEST_CASE("a library that cannot give MPI_THREAD_MULTIPLE is refused with the level it gave and what to do") {
  CHECK_NOTHROW(mpi::require_thread_multiple(MPI_THREAD_MULTIPLE));
  for (int level : {MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED}) {
    try {
      mpi::require_thread_multiple(level);
      FAIL("level ", level, " was accepted");
    } catch (const Error& e) {
      const std::string text = e.what();
      CHECK(text.find("gives " + mpi::thread_level_name(level) + " where dpx needs MPI_THREAD_MULTIPLE") !=
            std::string::npos);
      CHECK(text.find("--enable-mpi-thread-multiple") != std::string::npos);
    }
  }
}

TEST_CASE("clocks of processes on one machine align within a millisecond, with their uncertainty") {
  const auto offsets = align_clocks(mpi_group->world(), 8);
  REQUIRE(offsets.size() == static_cast<size_t>(mpi_group->size()));
  CHECK(offsets[0].offset_s == 0);
  for (const ClockOffset& c : offsets) {
    CHECK(std::abs(c.offset_s) < 1e-3);  // CLOCK_MONOTONIC is one clock on one machine
    CHECK(c.uncertainty_s >= 0);
    CHECK(c.uncertainty_s < 0.1);
  }
  CHECK(mpi_group->info().clock_offset_s.size() == offsets.size());
}

TEST_CASE("every rank's step records reach rank 0, indexed by rank") {
  Communicator& world = mpi_group->world();
  const int me = world.rank(), n = world.size();
  std::vector<StepRecord> steps(static_cast<size_t>(me + 1));  // rank r has r + 1 steps
  for (size_t i = 0; i < steps.size(); ++i) {
    steps[i].rank = me;
    steps[i].step = static_cast<int64_t>(i);
    steps[i].loss = me + 0.25 * static_cast<double>(i);
  }
  const std::vector<std::vector<StepRecord>> all = gather_records(world, steps);
  if (me != 0) {
    CHECK(all.empty());  // the others get nothing
    return;
  }
  REQUIRE(all.size() == static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) {
    REQUIRE(all[q].size() == static_cast<size_t>(q + 1));
    for (int s = 0; s <= q; ++s) {
      CHECK(all[q][s].rank == q);
      CHECK(all[q][s].step == s);
      CHECK(all[q][s].loss == q + 0.25 * s);
    }
  }
}

TEST_CASE("start-up agreement: every rank learns which option differs, or which rank failed and why") {
  Communicator& world = mpi_group->world();
  const int me = world.rank(), n = world.size();
  auto ready = [](const std::string& seed) {
    StartReport r;
    r.options = {{"--model", "mlp"}, {"--seed", seed}};
    return r;
  };
  CHECK_NOTHROW(agree_on_start(world, ready("1")));

  // The last rank was started with another --seed.
  std::string expected = "--seed is 1 on rank" + std::string(n > 2 ? "s 0-" + std::to_string(n - 2) : " 0") +
                         " and 2 on rank " + std::to_string(n - 1);
  if (n == 3) expected = "--seed is 1 on ranks 0, 1 and 2 on rank 2";
  try {
    agree_on_start(world, ready(me == n - 1 ? "2" : "1"));
    FAIL("the differing --seed went unnoticed");
  } catch (const SharedFailure& e) {
    CHECK(e.exit_code == 2);
    CHECK_MESSAGE(std::string(e.what()).find(expected) != std::string::npos, e.what());
  }

  // An option only some ranks have.
  StartReport extra = ready("1");
  if (me == 0) extra.options.push_back({"--trace", "t.json"});
  try {
    agree_on_start(world, extra);
    FAIL("the missing --trace went unnoticed");
  } catch (const SharedFailure& e) {
    CHECK_MESSAGE(std::string(e.what()).find("--trace is (absent) on rank") != std::string::npos, e.what());
  }

  // Rank 0 failed with a usage error: everyone gets it, naming rank 0.
  StartReport failed = ready("1");
  if (me == 0) {
    failed.code = 2;
    failed.message = "--batch-size must be at least 1 (got 0)";
  }
  try {
    agree_on_start(world, failed);
    FAIL("rank 0's failure went unnoticed");
  } catch (const SharedFailure& e) {
    CHECK(e.exit_code == 2);
    CHECK(std::string(e.what()) == "rank 0: --batch-size must be at least 1 (got 0)");
  }

  // Every rank failed alike (a missing data file): said once, with the runtime exit code.
  StartReport all_failed;
  all_failed.code = 1;
  all_failed.message = "data/train-images-idx3-ubyte: not found";
  try {
    agree_on_start(world, all_failed);
    FAIL("the failure went unnoticed");
  } catch (const SharedFailure& e) {
    CHECK(e.exit_code == 1);
    CHECK(std::string(e.what()) == "data/train-images-idx3-ubyte: not found");
  }
}

TEST_CASE("--comm-timeout must be positive") {
  CHECK_THROWS_AS(mpi_group->set_comm_timeout(0), UsageError);
  CHECK_THROWS_AS(mpi_group->set_comm_timeout(-1), UsageError);
  mpi_group->set_comm_timeout(120);
}

// Under mpirun every communicator of a process publishes what it is in to the process's watchdog,
// an NCCL wait on a GPU stream included (nccl_comm.cpp, NcclTransport::poll); that is what the
// MPI peers answer when another process asks (Watchdog::status_for), and what the watchdog times.
TEST_CASE("a wait of any communicator of this process, an NCCL one's included, is what the other processes are told") {
  const int rank = mpi_group->rank();
  auto watch = std::make_shared<CommWatch>("nccl-test", mpi_group->size(), std::vector<int>{rank}, 120, nullptr);
  Watchdog::of_process().watch(watch);
  CHECK(Watchdog::of_process().status_for("nccl-test").state == RankStatus::State::busy);
  CommCall call;
  call.kind = Collective::all_reduce;
  call.seq = 7;
  call.bytes = 1024;
  watch->begin_wait(rank, -1, &call);  // a wait for a call queued on a stream: a call while it lasts
  const RankStatus during = Watchdog::of_process().status_for("nccl-test");
  CHECK(during.state == RankStatus::State::in_call);
  CHECK(during.call.kind == Collective::all_reduce);
  CHECK(during.call.seq == 7);
  CHECK(during.comm == "nccl-test");
  watch->end_wait(rank);
  CHECK(Watchdog::of_process().status_for("nccl-test").state == RankStatus::State::busy);
  Watchdog::of_process().forget(watch.get());
}
