// Files in tests: a fresh, empty directory under the system's temporary folder for one test,
// removed with everything in it when the test ends (the name carries a tag, the process id and
// a counter, so tests running in parallel, ctest -j, never share one); an executable stand-in
// script; a file's contents; and what a call wrote to standard error.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace dpx::testing {

struct TempDir {
  std::filesystem::path path;

  explicit TempDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("dpx_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;  // never throw from a destructor; a leftover folder is harmless
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path / name).string(); }
  // Every entry of the directory, sorted, so a test sees any temporary left behind.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// A script at `path` with `text` (its shebang line first), executable by its owner, its folder made
// if need be: a stand-in for a program a test runs (gnuplot, nvidia-smi, dpx itself).
inline void write_executable(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

// The bytes of the file at `path` ("" when it cannot be read).
inline std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What `fn` wrote to standard error (file descriptor 2, so C's stdio and C++'s streams alike),
// which goes to a temporary file while it runs and is restored after, also when fn throws.
template <typename Fn>
std::string stderr_of(Fn fn) {
  TempDir tmp("stderr");
  const std::filesystem::path file = tmp.path / "stderr.txt";
  std::fflush(stderr);
  const int saved = ::dup(2);
  std::FILE* out = std::fopen(file.c_str(), "w");
  if (saved < 0 || !out || ::dup2(::fileno(out), 2) < 0) throw std::runtime_error("stderr_of: cannot redirect fd 2");
  struct Restore {
    int saved;
    std::FILE* out;
    ~Restore() {
      std::fflush(stderr);
      ::dup2(saved, 2);
      ::close(saved);
      std::fclose(out);
    }
  };
  {
    Restore restore{saved, out};
    fn();
  }
  return file_text(file);
}

}  // namespace dpx::testing
