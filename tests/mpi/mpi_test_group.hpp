// The MPI job the suites of tests/mpi/ run in (set by mpi_main.cpp).
#pragma once
#include "parallel/runtime/process_group.hpp"

namespace dpx::testing {
extern parallel::ProcessGroup* mpi_group;
}  // namespace dpx::testing
