// Atomic file output over POSIX descriptors: std::ofstream hides both the descriptor (so no
// fsync) and errno (so no reason to report), hence the small stream buffer below.
#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.hpp"

namespace dpx {

namespace {

std::string reason(int err) { return std::generic_category().message(err); }

// What the user can do about a failed write, by cause.
std::string hint(int err) {
  switch (err) {
    case ENOENT: return "; create the directory or pass another --out";
    case ENOTDIR: return "; a part of the path is a file, not a directory: pass another --out";
    case EACCES:
    case EPERM:
    case EROFS: return "; choose a writable location (another --out)";
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return "; free some disk space or write elsewhere";
    case EISDIR: return "; the path names a directory: give a file name";
    default: return "";
  }
}

[[noreturn]] void fail_write(const std::string& path, int err) {
  fail("cannot write ", path, ": ", reason(err), hint(err));
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
// including an exception thrown by the caller's writer.
struct TempFile {
  std::string path;
  int fd = -1;
  bool renamed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!renamed) ::unlink(path.c_str());
  }
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

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write) {
  if (path.empty()) fail("cannot write a file with an empty path: pass a file name (--out)");
  // The sequence number keeps two threads of one process (ranks) off each other's temporary.
  static std::atomic<uint64_t> sequence{0};
  TempFile tmp;
  tmp.path = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(sequence++);
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (tmp.fd < 0) fail_write(path, errno);
  {
    FdStreamBuf buf(tmp.fd);
    std::ostream os(&buf);
    write(os);
    os.flush();
    if (buf.error()) fail_write(path, buf.error());
    if (!os) fail("cannot write ", path, ": the stream reported an error while writing");
  }
  if (::fsync(tmp.fd) != 0) fail_write(path, errno);
  int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail_write(path, errno);  // NFS reports some write errors only here
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) fail_write(path, errno);
  tmp.renamed = true;
  sync_dir(parent_dir(path));
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  write_file_atomic(path, [&](std::ostream& os) {
    os.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  });
}

void ensure_writable_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string d = dir.empty() ? "." : dir;
  std::error_code ec;
  if (fs::exists(d, ec) && !fs::is_directory(d, ec))
    fail("cannot use ", d, " as an output directory: it exists and is not a directory; "
         "pass another --out");
  fs::create_directories(d, ec);
  if (ec) {
    int err = ec.value();
    fail("cannot create directory ", d, ": ", reason(err), err == ENOENT ? "; pass another --out" : hint(err));
  }
  // access() also reports a read-only file system (EROFS), which mode bits alone would not.
  if (::access(d.c_str(), W_OK | X_OK) != 0) {
    int err = errno;
    fail("cannot write into directory ", d, ": ", reason(err), hint(err));
  }
}

}  // namespace dpx
