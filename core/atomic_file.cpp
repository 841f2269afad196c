// Atomic file output over POSIX descriptors: std::ofstream hides both the descriptor (so no
// fsync) and errno (so no reason to report), hence the small stream buffer below.
#include "core/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

// The extended attribute that marks a named temporary as dpx's, holding the writer's pid: the sweep
// of a later run removes a file only when its name has dpx's form *and* it carries this mark.
constexpr const char* kTemporaryMark = "user.dpx.temporary";

// ".<name>.dpx-tmp.<pid>.<16 random hex digits>" beside `path`: unpredictable, so that nobody can
// plant a link under the name beforehand (and it is created with O_EXCL|O_NOFOLLOW anyway).
std::string temporary_name(const std::string& path) {
  uint64_t r = 0;
  if (::getrandom(&r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) {
    static std::atomic<uint64_t> counter{0};  // no entropy (very early boot): still unique here
    r = (static_cast<uint64_t>(::getpid()) << 32) ^ counter++ ^ static_cast<uint64_t>(::time(nullptr));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  const std::filesystem::path p(path);
  std::string name = ".";
  name.append(p.filename().string()).append(".dpx-tmp.").append(std::to_string(::getpid())).append(".").append(hex);
  return (p.parent_path() / name).string();
}

void mark(int fd) {
  const std::string pid = std::to_string(::getpid());
  (void)::fsetxattr(fd, kTemporaryMark, pid.data(), pid.size(), 0);  // best effort: not every file system keeps them
}

// The file being written: an unnamed inode in the destination's folder (O_TMPFILE: nothing to
// leave behind if the process dies) where the file system allows, else a named temporary made
// with O_EXCL|O_NOFOLLOW and marked. Closes, unlinks and unlists on every early exit, including an
// exception thrown by the caller's writer; a name is listed while it exists, for the signal handler.
struct TempFile {
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!name.empty() && !renamed) ::unlink(name.c_str());
    unlist();
  }
  TempFile() = default;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  // Gives the file the name `n` (already created by open or linkat) and lists it.
  void named(std::string n) {
    name = std::move(n);
    listed = strdup(name.c_str());
    if (listed) note_temporary(listed);
  }
  void unlist() {
    if (!listed) return;
    forget_temporary(listed);
    std::free(listed);
    listed = nullptr;
  }

  int fd = -1;
  bool unnamed = false;  // an O_TMPFILE inode, not linked anywhere yet
  std::string name;      // its name in the folder, once it has one
  char* listed = nullptr;
  bool renamed = false;
};

// Opens the file to write `path` through; throws (naming `flag`) when it cannot.
void open_temporary(TempFile& tmp, const std::string& path, std::string_view flag) {
  const std::string dir = parent_dir(path);
  tmp.fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (tmp.fd >= 0) {
    tmp.unnamed = true;
    mark(tmp.fd);
    return;
  }
  // Not every file system has unnamed files (NFS, some overlays): a named one then.
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) fail_write(path, errno, flag);
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::string name = temporary_name(path);
    tmp.fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (tmp.fd >= 0) {
      tmp.named(name);
      mark(tmp.fd);
      return;
    }
    if (errno != EEXIST) fail_write(path, errno, flag);
  }
  fail_write(path, EEXIST, flag);
}

// Gives an unnamed temporary a fresh name beside `path` (linkat never replaces an existing name).
void link_temporary(TempFile& tmp, const std::string& path, std::string_view flag) {
  const std::string proc = "/proc/self/fd/" + std::to_string(tmp.fd);
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::string name = temporary_name(path);
    int rc = ::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW);
    if (rc != 0 && errno == ENOENT) rc = ::linkat(tmp.fd, "", AT_FDCWD, name.c_str(), AT_EMPTY_PATH);  // no /proc
    if (rc == 0) {
      tmp.named(name);
      return;
    }
    if (errno != EEXIST) fail_write(path, errno, flag);
  }
  fail_write(path, EEXIST, flag);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write,
                       std::string_view flag) {
  if (path.empty()) fail("cannot write a file with an empty path: pass a file name (", flag, ")");
  TempFile tmp;
  open_temporary(tmp, path, flag);
  {
    FdStreamBuf buf(tmp.fd);
    std::ostream os(&buf);
    write(os);
    os.flush();
    if (buf.error()) fail_write(path, buf.error(), flag);
    if (!os) fail("cannot write ", path, " (", flag, "): the stream reported an error while writing");
  }
  if (::fsync(tmp.fd) != 0) fail_write(path, errno, flag);
  if (tmp.unnamed) link_temporary(tmp, path, flag);
  // rename(2) replaces `path` itself: a link there is replaced, its target left alone.
  if (::rename(tmp.name.c_str(), path.c_str()) != 0) fail_write(path, errno, flag);
  tmp.renamed = true;
  tmp.unlist();
  (void)::fremovexattr(tmp.fd, kTemporaryMark);  // the file is no temporary any more
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail_write(path, errno, flag);  // NFS reports some write errors only here
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

void check_writable_parent(const std::string& path, std::string_view flag) {
  if (path.empty()) fail("cannot write a file with an empty path: pass a file name (", flag, ")");
  const std::string dir = parent_dir(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) fail_write(path, errno, flag);
  if (!S_ISDIR(st.st_mode)) fail_write(path, ENOTDIR, flag);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) fail_write(path, errno, flag);
}

namespace {

// The pid in a temporary's name, ".NAME.dpx-tmp.PID.RANDOM" (RANDOM: 16 hex digits), or "" where
// `name` is not one.
std::string temporary_pid(std::string_view name) {
  constexpr std::string_view mark = ".dpx-tmp.";
  constexpr size_t random_digits = 16;
  if (name.size() < 2 + mark.size() + 1 + 1 + random_digits || name[0] != '.') return "";
  const size_t dot = name.size() - random_digits - 1;
  if (name[dot] != '.' || !std::all_of(name.begin() + dot + 1, name.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      }))
    return "";
  size_t first = dot;
  while (first > 0 && name[first - 1] >= '0' && name[first - 1] <= '9') --first;
  if (first == dot || first < 2 + mark.size() || name.substr(first - mark.size(), mark.size()) != mark) return "";
  return std::string(name.substr(first, dot - first));
}

}  // namespace

int remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir.empty() ? "." : dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string pid_text = temporary_pid(name);
    if (pid_text.empty()) continue;
    const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    // The name alone proves nothing: the file must be a regular file that carries dpx's mark with
    // that pid (a link, or a user's file that happens to look so, is left alone).
    std::error_code st;
    if (!fs::is_regular_file(fs::symlink_status(it->path(), st))) continue;
    char marked[32] = {};
    const ssize_t n = ::lgetxattr(it->path().c_str(), kTemporaryMark, marked, sizeof marked - 1);
    if (n <= 0 || std::string(marked, static_cast<size_t>(n)) != pid_text) continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

namespace {
std::array<std::atomic<char*>, 16> scratch_folders{};

// Unlinks every entry of `dir` (its files: a scratch folder holds no subfolders), then `dir`.
void remove_folder(const char* dir) noexcept {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  if (DIR* d = ::fdopendir(fd)) {
    while (const dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) (void)::unlinkat(fd, e->d_name, 0);
    ::closedir(d);  // closes fd
  } else {
    ::close(fd);
  }
  (void)::rmdir(dir);
}
}  // namespace

void remove_temporaries_in_progress() noexcept {
  for (auto& slot : writes_in_progress)
    if (const char* path = slot.load()) ::unlink(path);
  // The newest first: a folder listed inside an older one (plot's scratch in report's) is emptied
  // and removed before its parent.
  for (size_t i = scratch_folders.size(); i-- > 0;)
    if (const char* dir = scratch_folders[i].load()) remove_folder(dir);
}

ScratchFolder::ScratchFolder(const std::string& path) : listed_(strdup(path.c_str())) {
  if (!listed_) return;
  for (auto& slot : scratch_folders) {
    char* expected = nullptr;
    if (slot.compare_exchange_strong(expected, listed_)) return;
  }
}

ScratchFolder::~ScratchFolder() {
  if (!listed_) return;
  for (auto& slot : scratch_folders) {
    char* expected = listed_;
    if (slot.compare_exchange_strong(expected, nullptr)) break;
  }
  std::free(listed_);
}

namespace {
// A lock file holds the pid of the last run that took it, padded with spaces to this width: it is
// written over in place, never truncated, and a file of another size or content is not dpx's.
constexpr size_t kLockBytes = 20;
}  // namespace

OutputLock::OutputLock(const std::string& dir, std::string_view flag) {
  const std::string shown = dir.empty() ? std::string(".") : dir;
  const std::string path = shown + "/.dpx.lock";
  // Never through a link (O_NOFOLLOW), never blocking on a FIFO (O_NONBLOCK), never truncated.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd_ < 0 && errno == ELOOP)
    usage_fail(path, " is a symbolic link, not dpx's lock file (", flag, "): dpx writes no lock through a link; "
               "remove the link, or pass another ", flag);
  if (fd_ < 0) fail_write(path, errno, flag);
  char owner[kLockBytes + 1] = {};
  struct stat st {};
  const bool is_lock = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
                       static_cast<size_t>(st.st_size) <= kLockBytes &&
                       ::pread(fd_, owner, kLockBytes, 0) >= 0 &&
                       std::string_view(owner).find_first_not_of("0123456789 \n") == std::string_view::npos;
  if (!is_lock) {
    ::close(fd_);
    fd_ = -1;
    usage_fail(path, " exists and is not a dpx lock file (", flag, "): dpx does not write into it; move it away, or "
               "pass another ", flag);
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    std::string pid(owner);
    pid.erase(pid.find_last_not_of(" \n") + 1);
    if (err == EWOULDBLOCK)
      usage_fail("another dpx run", pid.empty() ? std::string() : detail::concat(" (pid ", pid, ")"),
                 " is writing into ", shown, " (", flag, "): wait for it to end, or pass another ", flag);
    fail("cannot lock ", path, " (", flag, "): ", reason(err));
  }
  std::string pid = std::to_string(::getpid());
  pid.resize(kLockBytes, ' ');
  (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the lock
}

}  // namespace dpx
