// Stopping on a signal. During training the first SIGINT, SIGTERM or SIGHUP asks the run to stop
// at its next safe point: the end of a step on which every rank agrees, where a checkpoint is
// written and every output file is flushed. A second one — or the first, in commands that have no
// such point (collective, models, infer) — ends the process at once, after removing the
// temporaries of writes in progress, with exit code 128 + the signal's number. Signals belong to
// the whole process, so this is dpx's one piece of global state: a flag and the handlers.
#pragma once
#include <exception>

namespace dpx::stop {

// Installs the handlers (idempotent). main() calls it first, before any thread starts: the
// signals are then blocked in every thread and taken by one thread of their own, which calls the
// handler installed at the time; the MPI watchdog installs its own, which calls request() and
// now() in turn.
void install_handlers();
// In a child process between fork() and exec(): unblocks the signals install_handlers blocked, so
// that the program it runs (gnuplot, a dpx step) gets SIGINT and SIGTERM as usual.
void unblock_signals_in_child();

// While one of these lives, the code running checks requested() at its safe points (training
// loops do); elsewhere the first signal already ends the process at once, as if it were the second.
class Graceful {
 public:
  Graceful();
  ~Graceful();
  Graceful(const Graceful&) = delete;
  Graceful& operator=(const Graceful&) = delete;
};
// Whether a Graceful lives: a signal is then a request, not an end.
bool graceful();
// 0 while no signal arrived, else the first signal's number.
int requested();
// Records a request to stop (async-signal-safe); prints, once, what will happen, when `announce`.
void request(int signal, bool announce = true);
// Passes the signal on to the children dpx runs and waits for them (core/children.hpp), removes
// the temporaries of writes in progress and the scratch folders, says so, and ends the process
// with 128 + signal.
[[noreturn]] void now(int signal);
// For a thread that ran a child which just ended: when the process is being ended by a signal
// (the child ended because now() passed it on), waits for now() to end the process rather than
// report the child's end as a failure of its own. Returns at once otherwise.
void wait_while_stopping();
// "SIGTERM", "SIGINT", "SIGHUP", or "a signal".
const char* signal_name(int signal);

// Thrown by a command that stopped early on a signal after saving what it could: main() exits
// with 128 + signal, as a shell reports a process the signal ended.
struct Stopped : std::exception {
  explicit Stopped(int s) : signal(s) {}
  const char* what() const noexcept override { return "stopped by a signal"; }
  int signal;
};

}  // namespace dpx::stop
