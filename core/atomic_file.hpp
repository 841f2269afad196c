// Atomic file output: every file dpx writes (CSV, JSON, traces, weights) is written to a
// temporary beside its destination, flushed, checked, fsynced and renamed over it, so a
// failed or interrupted run never leaves a partial file where a complete one is expected.
#pragma once
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace dpx {

// Calls `write` with a stream onto "<path>.tmp.<pid>.<n>" in the same directory, then flushes,
// checks the stream, fsyncs and renames the temporary over `path`. On any failure the
// temporary is removed and a dpx::Error names the path and the reason (strerror); an
// exception thrown by `write` itself is passed on unchanged, after the same clean-up.
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write);
void write_file_atomic(const std::string& path, std::string_view contents);

// Creates `dir` (and its parents) if missing; throws a dpx::Error if it cannot be created, is
// not a directory, or cannot be written. An empty string means the current directory.
void ensure_writable_dir(const std::string& dir);

}  // namespace dpx
