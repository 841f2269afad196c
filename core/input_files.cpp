// Input files: regular, bounded (core/input_files.hpp).
#include "core/input_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace dpx {

namespace {
const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}
}  // namespace

void check_input_file(const std::string& path, std::string_view who, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    usage_fail(who, ": cannot read '", path, "': ", std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    usage_fail(who, ": '", path, "' is ", kind_of(st.st_mode), ": dpx reads regular files only; name the file itself");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    usage_fail(who, ": '", path, "' is ", static_cast<uint64_t>(st.st_size) / kMiB, " MiB, more than the ",
               max_bytes / kMiB, " MiB dpx reads of such a file: name the file dpx wrote (or split a merged one)");
}

bool is_readable_input(const std::string& path, uint64_t max_bytes) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) <= max_bytes;
}

int open_regular_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    errno = ENODEV;
    return -1;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

}  // namespace dpx
