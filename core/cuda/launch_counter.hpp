// Counting this process's kernel launches through CUPTI's callback API, loaded at run time
// (dlopen of libcupti): dpx needs no CUPTI to build or run, and without one the kernel counts are
// unknown (-1). Every thread's launches go to its own LaunchCounter (core/launch_count.hpp), in
// the thread that launches, so an op can read how many kernels it launched.
#pragma once
#include <string>

namespace dpx::cuda {

// Starts counting, once per process: loads libcupti (beside libcudart, or on the library path)
// and subscribes to the launch APIs of the runtime and the driver. True when counting; else
// `why` says what was missing. Safe to call again.
bool count_launches(std::string* why = nullptr);

// Whether count_launches() succeeded.
bool counting_launches();

}  // namespace dpx::cuda
