// Signals (core/stop.hpp) are taken by a thread of their own: after install_handlers the three
// stop signals are blocked in the thread that installed them and in every thread it starts, a
// SIGTERM sent to the process still becomes a stop request, and a child process unblocks them
// before exec, so that the program it runs can be stopped as usual. (A handler that ran on a
// computing thread interrupted oneDNN's sgemm and corrupted the heap in a few % of SIGTERMs.)
#include <doctest/doctest.h>

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/stop.hpp"

namespace {

bool blocked_here(int sig) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, sig) == 1;
}

}  // namespace

TEST_CASE("after install_handlers the stop signals are blocked in every thread, and a SIGTERM is still a request") {
  dpx::stop::install_handlers();
  dpx::stop::install_handlers();  // idempotent: one signal thread
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) CHECK(blocked_here(sig));
  bool in_thread = false;
  std::thread([&] { in_thread = blocked_here(SIGTERM) && blocked_here(SIGINT) && blocked_here(SIGHUP); }).join();
  CHECK(in_thread);

  // With a Graceful scope the signal thread records it; nothing here is interrupted.
  dpx::stop::Graceful graceful;
  REQUIRE(dpx::stop::requested() == 0);
  kill(getpid(), SIGTERM);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (dpx::stop::requested() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(dpx::stop::requested() == SIGTERM);
}

TEST_CASE("a child unblocks the stop signals before exec: SIGTERM ends the program it runs") {
  dpx::stop::install_handlers();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dpx::stop::unblock_signals_in_child();
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(pid, SIGTERM);
  int status = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (done == 0) {  // still blocked: SIGTERM never reached it
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  CHECK(done == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
}
