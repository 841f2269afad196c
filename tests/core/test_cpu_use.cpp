// What other processes took of a run's cores (core/cpu_use.hpp): /proc/stat's busy ticks of the
// listed cores, a process's own ticks from /proc/PID/stat, the share between two samples, and a
// busy loop beside this process seen as such.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "core/clock.hpp"
#include "core/cpu_use.hpp"

using namespace dpx;

TEST_CASE("busy ticks: user + nice + system + irq + softirq + steal of the listed cores only") {
  const std::string stat =
      "cpu  900 9 90 9000 90 9 9 90 0 0\n"
      "cpu0 100 1 10 1000 10 1 1 10 0 0\n"   // busy 123
      "cpu1 200 2 20 2000 20 2 2 20 0 0\n"   // busy 246
      "cpu12 5 0 5 1 0 0 0\n"                // an old kernel: no steal column; busy 10
      "intr 12345 0 0\n"
      "ctxt 999\n";
  CHECK(busy_ticks(stat, {0}) == 123);
  CHECK(busy_ticks(stat, {0, 1}) == 369);
  CHECK(busy_ticks(stat, {12}) == 10);
  CHECK(busy_ticks(stat, {1, 7}) == 246);  // a core the text lacks counts nothing
  CHECK(busy_ticks(stat, {}) == 0);
}

TEST_CASE("a process's ticks: utime + stime, after a comm with spaces and parentheses") {
  CHECK(process_ticks("4242 (dpx) R 1 4242 4242 0 -1 4194304 100 0 0 0 77 23 0 0 20 0 9 0 1000 0 0") == 100);
  CHECK(process_ticks("17 (a (b) c) S 1 17 17 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 50 0 0") == 11);
  CHECK(process_ticks("") == 0);
}

TEST_CASE("the share: the cores' busy time less the run's own, over the window's core time") {
  CpuSample a{true, 10.0, 100.0, 50.0, 4}, b{true, 12.0, 106.0, 53.0, 4};
  CHECK(other_cpu_share(a, b) == doctest::Approx(3.0 / 8.0));  // 6 busy, 3 ours, 2 s x 4 cores
  b.own_s = 60.0;                                               // more than the cores did: ticks' rounding
  CHECK(other_cpu_share(a, b) == 0);
  CpuSample short_window = b;
  short_window.wall_s = 10.1;
  CHECK(other_cpu_share(a, short_window) == -1);                // under 0.2 s: unknown
  CHECK(other_cpu_share(CpuSample{}, b) == -1);                 // /proc unreadable
}

TEST_CASE("a busy loop of another process is seen; this process's own work is not") {
  const std::vector<int> me = {static_cast<int>(getpid())};
  // This process busy on one core for half a second: its own time, so (nearly) no other's.
  CpuSample a = sample_cpu(me);
  REQUIRE(a.valid);
  const double t0 = now_s();
  volatile double x = 0;
  while (now_s() - t0 < 0.6) x = x + 1;
  CpuSample b = sample_cpu(me);
  const double alone = other_cpu_share(a, b);
  MESSAGE("others took ", alone, " of ", a.cores, " cores while this process worked (other tests may run beside it)");
  CHECK(alone >= 0);
  // A child busy on every core: most of the cores' time is another process's.
  const int cores = a.cores;
  std::vector<pid_t> children;
  for (int i = 0; i < cores; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const double start = now_s();
      volatile double y = 0;
      while (now_s() - start < 2.0) y = y + 1;
      _exit(0);
    }
    children.push_back(pid);
  }
  CpuSample c = sample_cpu(me);
  usleep(800000);
  CpuSample d = sample_cpu(me);
  for (pid_t pid : children) kill(pid, SIGKILL);
  for (pid_t pid : children) waitpid(pid, nullptr, 0);
  const double busy = other_cpu_share(c, d);
  MESSAGE("others took ", busy, " with a busy loop on each of ", cores, " cores");
  CHECK(busy > 0.6);
  CHECK(busy > kDisturbedShare);
}
