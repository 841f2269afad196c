// The child processes dpx runs (gnuplot for a figure, the dpx steps of a study) end with it: each
// runs in a process group of its own, listed while it runs, and when a signal ends dpx
// (stop::now), the signal is passed on to every listed group and dpx waits for them (at most
// kChildGraceSeconds, then SIGKILL), so that no child is left orphaned and writing.
#pragma once
#include <sys/types.h>

namespace dpx {

inline constexpr int kChildGraceSeconds = 20;

// Lists a forked child from the parent's side (also making it a group leader, as the child does
// itself after fork: whichever runs first) for the life of the object.
class ChildProcess {
 public:
  explicit ChildProcess(pid_t pid);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

 private:
  pid_t pid_;
};

// In the child, between fork and exec: a process group of its own.
void become_group_leader();

// Passes `signal` to every listed child's group, waits up to kChildGraceSeconds for them to end,
// then kills what is left. Called by stop::now on the signal thread; never throws.
void end_children(int signal) noexcept;

}  // namespace dpx
