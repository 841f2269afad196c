// Ranks that stop on a signal must stop after the same step, though the signal may reach them at
// different moments, or only some of them. A StopVote is that agreement: every rank calls vote()
// after each optimizer update, in the same sequence, saying whether it was asked to stop; it
// returns true on every rank at the same update. Backends vote without slowing the step: the
// threads backend through shared memory, the mpi backend with a nonblocking all-reduce that
// completes during the next step; both answer one update after the first rank was asked.
#pragma once
#include <cstdint>
#include <memory>

namespace dpx::parallel {

class StopVote {
 public:
  virtual ~StopVote() = default;
  virtual bool vote(bool asked) = 0;
};

// One rank alone: stops when asked.
class LocalStopVote final : public StopVote {
 public:
  bool vote(bool asked) override { return asked; }
};

}  // namespace dpx::parallel
