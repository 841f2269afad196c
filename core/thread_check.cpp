// Asking the system for a run's threads before OpenMP does (see thread_check.hpp).
#include "core/thread_check.hpp"

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "core/error.hpp"

namespace dpx {

namespace {

// The threads wait here until every one has been started (so they count against the limits
// together), then end.
void* wait_for_release(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  while (!released->load(std::memory_order_acquire)) released->wait(false, std::memory_order_acquire);
  return nullptr;
}

// A limit as `ulimit` prints it: `divisor` 1024 for those it gives in kB.
std::string limit_text(int resource, unsigned long long divisor) {
  rlimit l{};
  if (getrlimit(resource, &l) != 0 || l.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(static_cast<unsigned long long>(l.rlim_cur) / divisor);
}

}  // namespace

void check_threads_available(int count, const std::string& asked_by) {
  std::atomic<bool> released{false};
  std::vector<pthread_t> started;
  started.reserve(static_cast<size_t>(std::max(count, 0)));
  int refused = 0;
  // This thread is one of the team: start count - 1 more.
  for (int i = 1; i < count; ++i) {
    pthread_t t;
    refused = pthread_create(&t, nullptr, wait_for_release, &released);
    if (refused != 0) break;
    started.push_back(t);
  }
  released.store(true, std::memory_order_release);
  released.notify_all();
  for (pthread_t t : started) pthread_join(t, nullptr);
  if (refused == 0) return;
  throw UsageError(detail::concat(
      asked_by, " needs ", count, " threads at once, but the system refused thread ", started.size() + 2, " (",
      std::strerror(refused), "; ulimit -u (processes and threads): ", limit_text(RLIMIT_NPROC, 1),
      ", ulimit -v (kB of memory): ", limit_text(RLIMIT_AS, 1024), ", ulimit -s (kB of stack per thread): ",
      limit_text(RLIMIT_STACK, 1024), "). Ask for fewer threads, or raise the limit that stopped them"));
}

}  // namespace dpx
