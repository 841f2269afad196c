// The kernel launches of this thread, counted by the API callbacks of a profiler (on CUDA: CUPTI's,
// core/cuda/launch_counter.cpp) for dpx bench --profile-ops's kernels column. A launch is counted
// once even when the callbacks nest (a runtime launch that the runtime makes through a driver
// launch, or an internal entry point calling the public one): only the outermost callback counts.
#pragma once
#include <cstdint>

namespace dpx {

class LaunchCounter {
 public:
  // A launch API's entry and exit, as the callbacks report them on the calling thread.
  void enter() {
    if (depth_++ == 0) ++launches_;
  }
  void exit() {
    if (depth_ > 0) --depth_;
  }
  int64_t launches() const { return launches_; }

 private:
  int depth_ = 0;
  int64_t launches_ = 0;
};

// This thread's counter.
inline LaunchCounter& this_thread_launches() {
  thread_local LaunchCounter counter;
  return counter;
}

}  // namespace dpx
