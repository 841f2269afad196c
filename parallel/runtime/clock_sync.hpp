// Aligning the ranks' clocks. Every rank times its phases with its own steady clock; processes on
// different nodes have clocks with different origins, so `wait` (which compares the ranks' ends of
// backward) and traces need every time on one clock: rank 0's. Each offset is estimated as NTP
// does: ping-pongs between rank 0 and the rank, and the one with the shortest round trip counts;
// half that round trip bounds the error.
#pragma once
#include <vector>

#include "parallel/comm/communicator.hpp"

namespace dpx::parallel {

struct ClockOffset {
  double offset_s = 0;       // this rank's steady clock minus rank 0's
  double uncertainty_s = 0;  // |error| <= this (half the shortest round trip)
};

// Collective: every rank's offset, on every rank. rounds >= 1 ping-pongs per rank.
std::vector<ClockOffset> align_clocks(Communicator& comm, int rounds = 16);

}  // namespace dpx::parallel
