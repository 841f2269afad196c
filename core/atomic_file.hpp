// Atomic file output: every file dpx writes (CSV, JSON, traces, weights, checkpoints) is written
// to a temporary beside its destination, flushed, checked, fsynced and renamed over it, so a
// failed or interrupted run never leaves a partial file where a complete one is expected. The
// temporaries of writes in progress are known, so that a signal can remove them; those of a
// killed process are removed by the next run that writes into the same folder. Errors name the
// flag that chose the path (`flag`: "--out", "--save", "--csv", ...), so the user knows what to change.
#pragma once
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace dpx {

// Calls `write` with a stream onto a temporary in the same directory — an unnamed file
// (O_TMPFILE), or where the file system has none a new ".<name>.dpx-tmp.<pid>.<random>" made with
// O_EXCL|O_NOFOLLOW and marked as dpx's (the extended attribute user.dpx.temporary) — then
// flushes, checks the stream, fsyncs, and renames it over `path` (a link at `path` is replaced,
// its target untouched). On any failure the temporary is removed, `path` is left as it was, and a
// dpx::Error names the path and the reason (strerror); an exception thrown by `write` itself is
// passed on unchanged, after the same clean-up.
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write,
                       std::string_view flag = "--out");
void write_file_atomic(const std::string& path, std::string_view contents, std::string_view flag = "--out");

// Creates `dir` (and its parents) if missing; throws a dpx::Error if it cannot be created, is
// not a directory, or cannot be written. An empty string means the current directory. Removes
// the temporaries that killed dpx processes left in it (remove_stale_temporaries).
void ensure_writable_dir(const std::string& dir, std::string_view flag = "--out");

// Checks, without creating or writing anything, that a file could be written at `path`: its
// folder exists, is a folder, and may be written into. Throws a dpx::Error naming `flag`.
void check_writable_parent(const std::string& path, std::string_view flag);

// Removes every named temporary in `dir` that dpx can prove it made — named
// ".<name>.dpx-tmp.<pid>.<16 hex digits>", a regular file, and marked with that pid — whose process
// no longer exists (the debris of a write that SIGKILL interrupted); returns how many. Never a file
// by its name alone, a link, or another live process's file.
int remove_stale_temporaries(const std::string& dir);

// Unlinks the temporaries of the writes in progress in this process, and empties and removes the
// scratch folders in use (ScratchFolder). Called by stop::now before it ends the process at once.
void remove_temporaries_in_progress() noexcept;

// A scratch folder listed for the life of the object: a signal that ends dpx removes it with its
// files (no subfolders), as it does the temporaries of writes (dpx plot's .dpx-plot.XXXXXX in
// --out, dpx report's in $TMPDIR). The folder itself is the caller's to make and remove.
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& path);
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

 private:
  char* listed_ = nullptr;
};

// An exclusive lock on an output folder for the life of the object, so that two runs cannot mix
// their files in one --out: the second is refused with the first one's pid. The lock file
// ".dpx.lock" stays (empty but for the pid); the operating system drops the lock when the
// process ends, however it ends.
class OutputLock {
 public:
  OutputLock(const std::string& dir, std::string_view flag);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace dpx
