// Gathering variable-sized data at rank 0 over any communicator (its sizes first, then each
// rank's bytes by send/recv): step records at the end of a run, checkpoint parts.
#pragma once
#include <cstddef>
#include <vector>

#include "parallel/comm/communicator.hpp"

namespace dpx::parallel {

// Collective. Rank 0 gets every rank's bytes, indexed by rank (its own included); the others get
// nothing.
std::vector<std::vector<std::byte>> gather_bytes(Communicator& comm, const std::vector<std::byte>& mine);

}  // namespace dpx::parallel
