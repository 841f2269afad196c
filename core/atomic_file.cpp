// Atomic file output over POSIX descriptors: std::ofstream hides both the descriptor (so no
// fsync) and errno (so no reason to report), hence the small stream buffer below.
#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <system_error>
#include <vector>

#include "core/error.hpp"

namespace dpx {

namespace {

std::string reason(int err) { return std::generic_category().message(err); }

// What the user can do about a failed write, by cause; `flag` chose the path.
std::string hint(int err, std::string_view flag) {
  const std::string f(flag);
  switch (err) {
    case ENOENT: return "; create the directory or pass another " + f;
    case ENOTDIR: return "; a part of the path is a file, not a directory: pass another " + f;
    case EACCES:
    case EPERM:
    case EROFS: return "; choose a writable location (another " + f + ")";
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return "; free some disk space or write elsewhere (" + f + ")";
    case EISDIR: return "; the path names a directory: give " + f + " a file name";
    case ENOMEM: return "; the machine is out of memory";
    default: return "";
  }
}

[[noreturn]] void fail_write(const std::string& path, int err, std::string_view flag) {
  fail("cannot write ", path, " (", flag, "): ", reason(err), hint(err, flag));
}

// The temporaries being written right now, for remove_temporaries_in_progress: a fixed table of
// C strings, so that a signal handler can walk it without locks or allocation.
constexpr size_t kMaxWrites = 256;
std::array<std::atomic<char*>, kMaxWrites> writes_in_progress{};

void note_temporary(char* path) {
  for (auto& slot : writes_in_progress) {
    char* expected = nullptr;
    if (slot.compare_exchange_strong(expected, path)) return;
  }
  // More than kMaxWrites at once: this one is not removed on a signal (the next run does).
}

void forget_temporary(const char* path) {
  for (auto& slot : writes_in_progress) {
    char* expected = const_cast<char*>(path);
    if (slot.compare_exchange_strong(expected, nullptr)) return;
  }
}

// A stream buffer that writes to a descriptor and remembers the first errno it met, so the
// caller can say why a write failed. Large blocks (tensor data) bypass the buffer.
class FdStreamBuf : public std::streambuf {
 public:
  explicit FdStreamBuf(int fd) : fd_(fd), buf_(size_t{1} << 16) { reset_put_area(); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type ch) override {
    if (!flush_buffer()) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }

  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (n < static_cast<std::streamsize>(buf_.size())) return std::streambuf::xsputn(s, n);
    if (!flush_buffer() || !write_all(s, static_cast<size_t>(n))) return 0;
    return n;
  }

  int sync() override { return flush_buffer() ? 0 : -1; }

 private:
  void reset_put_area() { setp(buf_.data(), buf_.data() + buf_.size()); }

  bool write_all(const char* p, size_t n) {
    if (error_) return false;
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        error_ = errno;
        return false;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  bool flush_buffer() {
    size_t n = static_cast<size_t>(pptr() - pbase());
    bool ok = write_all(pbase(), n);
    reset_put_area();
    return ok;
  }

  int fd_;
  std::vector<char> buf_;
  int error_ = 0;
};

// Owns the temporary until it has been renamed: closes and unlinks it on every early exit,
// including an exception thrown by the caller's writer, and lists it while it exists.
struct TempFile {
  explicit TempFile(std::string p) : path(std::move(p)), listed(strdup(path.c_str())) {
    if (listed) note_temporary(listed);
  }
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!renamed) ::unlink(path.c_str());
    if (listed) {
      forget_temporary(listed);
      std::free(listed);
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  std::string path;
  char* listed;
  int fd = -1;
  bool renamed = false;
};

std::string parent_dir(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// Makes the rename itself durable. Best effort: the data is already on disk, and some file
// systems refuse fsync on a directory; failing the run for that would lose a good file.
void sync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write,
                       std::string_view flag) {
  if (path.empty()) fail("cannot write a file with an empty path: pass a file name (", flag, ")");
  // The sequence number keeps two threads of one process (ranks) off each other's temporary.
  static std::atomic<uint64_t> sequence{0};
  TempFile tmp(path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(sequence++));
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (tmp.fd < 0) fail_write(path, errno, flag);
  {
    FdStreamBuf buf(tmp.fd);
    std::ostream os(&buf);
    write(os);
    os.flush();
    if (buf.error()) fail_write(path, buf.error(), flag);
    if (!os) fail("cannot write ", path, " (", flag, "): the stream reported an error while writing");
  }
  if (::fsync(tmp.fd) != 0) fail_write(path, errno, flag);
  int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail_write(path, errno, flag);  // NFS reports some write errors only here
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) fail_write(path, errno, flag);
  tmp.renamed = true;
  sync_dir(parent_dir(path));
}

void write_file_atomic(const std::string& path, std::string_view contents, std::string_view flag) {
  write_file_atomic(
      path, [&](std::ostream& os) { os.write(contents.data(), static_cast<std::streamsize>(contents.size())); }, flag);
}

void ensure_writable_dir(const std::string& dir, std::string_view flag) {
  namespace fs = std::filesystem;
  const std::string d = dir.empty() ? "." : dir;
  std::error_code ec;
  if (fs::exists(d, ec) && !fs::is_directory(d, ec))
    fail("cannot use ", d, " as an output directory (", flag, "): it exists and is not a directory; pass another ",
         flag);
  fs::create_directories(d, ec);
  if (ec) {
    int err = ec.value();
    fail("cannot create directory ", d, " (", flag, "): ", reason(err),
         err == ENOENT ? "; pass another " + std::string(flag) : hint(err, flag));
  }
  // access() also reports a read-only file system (EROFS), which mode bits alone would not.
  if (::access(d.c_str(), W_OK | X_OK) != 0) {
    int err = errno;
    fail("cannot write into directory ", d, " (", flag, "): ", reason(err), hint(err, flag));
  }
  remove_stale_temporaries(d);
}

int remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  static const std::regex temporary(R"(.*\.tmp\.([0-9]+)\.[0-9]+)");
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir.empty() ? "." : dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string name = it->path().filename().string();
    if (!std::regex_match(name, m, temporary)) continue;
    const long pid = std::strtol(m[1].str().c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

void remove_temporaries_in_progress() noexcept {
  for (auto& slot : writes_in_progress)
    if (const char* path = slot.load()) ::unlink(path);
}

OutputLock::OutputLock(const std::string& dir, std::string_view flag) {
  const std::string path = (dir.empty() ? std::string(".") : dir) + "/.dpx.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) fail_write(path, errno, flag);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char owner[32] = {};
    (void)!::pread(fd_, owner, sizeof owner - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      usage_fail("another dpx run", owner[0] ? detail::concat(" (pid ", owner, ")") : std::string(),
                 " is writing into ", dir.empty() ? "." : dir, " (", flag, "): wait for it to end, or pass another ",
                 flag);
    fail("cannot lock ", path, " (", flag, "): ", reason(err));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the lock
}

}  // namespace dpx
