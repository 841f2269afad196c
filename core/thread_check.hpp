// Whether this process may start the threads a run needs, asked before the run starts them.
// OpenMP (libgomp) ends the process with "libgomp: Thread creation failed" when the system
// refuses a thread (a low `ulimit -u`, or `ulimit -v` too small for their stacks); asked first,
// the refusal is a usage error that names the flag that asked for the threads and the limit.
#pragma once
#include <string>

namespace dpx {

// Starts `count` threads that all live at once (as an OpenMP team does), then ends them; throws a
// UsageError naming `asked_by` (e.g. "--threads 64 x 4 ranks") when the system refuses one.
void check_threads_available(int count, const std::string& asked_by);

}  // namespace dpx
