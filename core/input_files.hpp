// Inputs must be regular files of a bounded size: a FIFO or a device given where dpx reads a file
// once blocked plot, report and fit for ever, and an edited or huge file made them work for minutes
// (docs/troubleshooting.md). Checked before the file is opened; errors name the flag or
// the command and say what to do.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace dpx {

// Throws dpx::UsageError naming `who` (a flag or a command) unless `path` is a regular file (a
// link to one is fine) of at most `max_bytes`.
void check_input_file(const std::string& path, std::string_view who, uint64_t max_bytes);

// Whether `path` is a regular file of at most `max_bytes` (an optional file beside an input, such as
// a bench folder's command.txt: anything else is treated as absent, never opened).
bool is_readable_input(const std::string& path, uint64_t max_bytes);

// Opens `path` for reading without blocking on a FIFO: O_NONBLOCK is cleared again once the
// descriptor is known to be a regular file. Returns -1 and sets errno (ENODEV for a FIFO, device
// or socket) when it is not one.
int open_regular_file(const std::string& path);

inline constexpr uint64_t kMiB = uint64_t(1) << 20;

}  // namespace dpx
