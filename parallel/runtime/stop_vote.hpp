// Ranks that stop on a signal must stop after the same update, though the signal may reach them
// at different moments, or only some of them. The StopVote is that agreement, one for every
// backend: after each optimizer update every rank starts an all-reduce (max) of one byte, the
// signal it was asked to stop by (0: none), over the ranks' host communicator, and reads the
// answer after the next update, so the step never waits for it; every rank stops after the same
// update, the one after the first rank was asked, and names the same signal (SIGINT sent to one
// rank is reported as SIGINT by all). A rank alone (no communicator) stops when asked.
#pragma once
#include <array>
#include <cstdint>
#include <memory>

#include "parallel/comm/communicator.hpp"

namespace dpx::parallel {

class StopVote {
 public:
  explicit StopVote(Communicator* comm) : comm_(comm) {}
  // Waits for the last vote (it is on every rank's communicator), unless an error unwinds.
  ~StopVote();
  StopVote(const StopVote&) = delete;
  StopVote& operator=(const StopVote&) = delete;

  // Every rank calls it after each update, in the same sequence, with the signal it was asked to
  // stop by (0: none): the signal to stop by now, the largest any rank was asked by, or 0.
  int vote(int signal);

 private:
  Communicator* comm_;
  Work pending_;  // the vote started after the previous update
  // Its flag and its answer; shared with the call, which may outlive this object while an error
  // unwinds.
  std::shared_ptr<std::array<uint8_t, 2>> flags_ = std::make_shared<std::array<uint8_t, 2>>();
};

}  // namespace dpx::parallel
