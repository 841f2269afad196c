// gnuplot as a child process, for `dpx plot`: finding the executable on PATH and running it on a
// script file with its output kept for the error message.
#pragma once
#include <string>

namespace dpx::analysis {

// The executable `name` resolves to (a PATH search unless it holds a '/'); "" if none.
std::string find_executable(const std::string& name);

// Runs `gnuplot script` in the folder `dir` with stdout and stderr into the file `log`; returns
// its exit status (127: it could not be started, 126: `dir` could not be entered). The script
// names its outputs relative to `dir`, so that no path (a user's --out, a temporary folder) is
// ever part of the script's text. Throws dpx::Error when it cannot be forked or waited for.
int run_gnuplot(const std::string& gnuplot, const std::string& script, const std::string& log,
                const std::string& dir);

// A file's text ("" when it cannot be read): gnuplot's log, for the error message.
std::string file_text_of(const std::string& path);

}  // namespace dpx::analysis
