// The vote on stopping after a signal (see stop_vote.hpp).
#include "parallel/runtime/stop_vote.hpp"

#include <algorithm>
#include <exception>

namespace dpx::parallel {

StopVote::~StopVote() {
  if (std::uncaught_exceptions() > 0) return;
  try {
    pending_.wait();
  } catch (const std::exception&) {  // the job is ending with another error
  }
}

int StopVote::vote(int signal) {
  if (!comm_) return signal;
  pending_.wait();
  std::array<uint8_t, 2>& f = *flags_;
  const int stop = pending_.started() ? f[1] : 0;
  f[0] = static_cast<uint8_t>(std::clamp(signal, 0, 255));  // signal numbers are below 65
  pending_ = comm_->all_reduce_async(&f[0], &f[1], 1, DType::u8, ReduceOp::max, {},
                                     [keep = flags_] {});  // the flags live as long as the call
  return stop;
}

}  // namespace dpx::parallel
