// The signal handlers of core/stop.hpp. Everything a handler calls is async-signal-safe: an atomic
// store, write(2), unlink(2) (through remove_temporaries_in_progress) and _exit(2).
//
// The handlers run on one thread of their own, never on a thread that computes: install_handlers
// blocks the three signals in main() before any other thread exists (every thread inherits the
// mask) and starts a thread that takes them with sigwaitinfo and calls whatever handler is
// installed at that moment (this file's, or the MPI watchdog's). A handler run on a computing
// thread interrupted oneDNN's JIT sgemm, and in about 4 % of SIGTERMs on a loaded machine the heap
// was corrupted a moment later ("corrupted size vs. prev_size", abort in dnnl_sgemm's free; 6 of
// 150 runs, none of 150 without oneDNN; none of 150 with this thread).
#include "core/stop.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "core/atomic_file.hpp"
#include "core/children.hpp"

namespace dpx::stop {

namespace {

std::atomic<int> first_signal{0};
std::atomic<int> graceful_scopes{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");

void say(const char* text) { (void)!::write(STDERR_FILENO, text, std::strlen(text)); }

void on_signal(int signal) {
  if (first_signal.load() != 0 || graceful_scopes.load() == 0) now(signal);
  request(signal);
}

}  // namespace

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGXCPU: return "SIGXCPU (the CPU time limit, ulimit -t)";
    default: return "a signal";
  }
}

namespace {

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGXCPU}) sigaddset(&set, sig);
  return set;
}

// The signal thread: each signal goes to the handler installed now; with the default disposition
// the signal is raised again, unblocked in this thread, so that it ends the process as it would have.
void take_signals(sigset_t set) {
  for (;;) {
    siginfo_t info{};
    const int sig = sigwaitinfo(&set, &info);
    if (sig < 0) continue;  // EINTR
    struct sigaction current {};
    sigaction(sig, nullptr, &current);
    if (current.sa_flags & SA_SIGINFO) {
      current.sa_sigaction(sig, &info, nullptr);
    } else if (current.sa_handler == SIG_DFL) {
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      raise(sig);
    } else if (current.sa_handler != SIG_IGN) {
      current.sa_handler(sig);
    }
  }
}

std::atomic<bool> installed{false};

}  // namespace

void install_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGXCPU}) sigaction(sig, &action, nullptr);
  // A file over `ulimit -f` would raise SIGXFSZ and end the process on the spot, temporaries and
  // all; ignored, the write fails with EFBIG instead, and the writer says so and cleans up.
  ::signal(SIGXFSZ, SIG_IGN);
  if (installed.exchange(true)) return;
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // this thread, and every thread it starts from now on
  std::thread(take_signals, set).detach();
}

void unblock_signals_in_child() {
  const sigset_t set = stop_signals();
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
}

int requested() { return first_signal.load(); }

void wait_while_stopping() {
  if (first_signal.load() == 0 || graceful_scopes.load() > 0) return;
  for (;;) ::pause();  // the signal thread ends the process (stop::now)
}

Graceful::Graceful() { graceful_scopes.fetch_add(1); }
Graceful::~Graceful() { graceful_scopes.fetch_sub(1); }
bool graceful() { return graceful_scopes.load() > 0; }

void request(int signal, bool announce) {
  int expected = 0;
  if (!first_signal.compare_exchange_strong(expected, signal) || !announce) return;
  say("dpx: ");
  say(signal_name(signal));
  say(": stopping at the end of the current step (send it again to stop at once)\n");
}

void now(int signal) {
  int expected = 0;
  const bool again = !first_signal.compare_exchange_strong(expected, signal);  // runners see it: wait_while_stopping
  end_children(signal);  // they get the signal too, and are waited for: none left orphaned
  remove_temporaries_in_progress();
  say("dpx: ");
  say(signal_name(signal));
  say(again ? " again: stopped at once\n" : ": stopped\n");
  ::_exit(128 + signal);
}

}  // namespace dpx::stop
