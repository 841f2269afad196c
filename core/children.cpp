// The table of running children (core/children.hpp): a fixed array of atomics, so that the signal
// thread reads it without locks while the threads that run children add and remove their own.
#include "core/children.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <ctime>

namespace dpx {

namespace {

constexpr size_t kMaxChildren = 64;
std::array<std::atomic<pid_t>, kMaxChildren> children{};

void signal_group(pid_t pid, int signal) {
  if (::kill(-pid, signal) != 0) (void)::kill(pid, signal);  // the child may not lead its group yet
}

}  // namespace

ChildProcess::ChildProcess(pid_t pid) : pid_(pid) {
  (void)::setpgid(pid, pid);  // the child does the same; one of the two calls takes effect first
  for (auto& slot : children) {
    pid_t expected = 0;
    if (slot.compare_exchange_strong(expected, pid)) return;
  }
  // More than kMaxChildren at once: this one is not ended with dpx (never the case today).
}

ChildProcess::~ChildProcess() {
  for (auto& slot : children) {
    pid_t expected = pid_;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

void become_group_leader() { (void)::setpgid(0, 0); }

void end_children(int signal) noexcept {
  std::array<pid_t, kMaxChildren> pids{};  // the children found now; 0 once known to have ended
  bool any = false;
  for (size_t i = 0; i < kMaxChildren; ++i)
    if (const pid_t pid = children[i].load(); pid > 0) {
      pids[i] = pid;
      signal_group(pid, signal);
      any = true;
    }
  if (!any) return;
  const timespec tick{0, 50 * 1000 * 1000};
  for (int waited = 0; waited < kChildGraceSeconds * 20; ++waited) {
    bool running = false;
    for (pid_t& pid : pids) {
      if (pid <= 0) continue;
      // Reaped here (pid), or already by the thread that ran it (-1, ECHILD): ended either way.
      if (::waitpid(pid, nullptr, WNOHANG) != 0) pid = 0;
      else running = true;
    }
    if (!running) return;
    ::nanosleep(&tick, nullptr);
  }
  for (pid_t pid : pids)
    if (pid > 0) {
      signal_group(pid, SIGKILL);
      (void)::waitpid(pid, nullptr, 0);
    }
}

}  // namespace dpx
