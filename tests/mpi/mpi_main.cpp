// doctest's main for the suites that run under mpirun (tests/mpi/): every process joins the MPI
// job, runs the same test cases (so their collectives meet), and reports its own failures. Rank 0
// prints the usual summary; the other ranks print only what failed, on standard error.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <iostream>

#include "mpi_test_group.hpp"

namespace dpx::testing {
parallel::ProcessGroup* mpi_group = nullptr;
}

int main(int argc, char** argv) {
  auto group = dpx::parallel::join_process_group(argc, argv);
  if (!group->launched()) {
    std::fprintf(stderr, "tests/mpi: run this binary under mpirun (ctest does)\n");
    return 1;
  }
  dpx::testing::mpi_group = group.get();
  group->set_comm_timeout(120);  // a test that loses its way ends in a stall report, not a hang
  doctest::Context context(argc, argv);
  if (group->rank() != 0) {
    context.setCout(&std::cerr);
    context.setOption("minimal", true);
  }
  return context.run();  // then the group's destructor meets the other ranks once more and finalizes MPI
}
