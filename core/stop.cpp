// The signal handlers of core/stop.hpp. Everything a handler calls is async-signal-safe: an atomic
// store, write(2), unlink(2) (through remove_temporaries_in_progress) and _exit(2).
#include "core/stop.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "core/atomic_file.hpp"

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
    default: return "a signal";
  }
}

void install_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &action, nullptr);
}

int requested() { return first_signal.load(); }

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
  remove_temporaries_in_progress();
  say("dpx: ");
  say(signal_name(signal));
  say(first_signal.load() != 0 ? " again: stopped at once\n" : ": stopped\n");
  ::_exit(128 + signal);
}

}  // namespace dpx::stop
