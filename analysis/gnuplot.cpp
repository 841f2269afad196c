// gnuplot as a child process (analysis/gnuplot.hpp): fork and exec, not system(), so that no shell
// parses the paths, and the exit status is gnuplot's own.
#include "analysis/gnuplot.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/children.hpp"
#include "core/error.hpp"
#include "core/stop.hpp"

namespace dpx::analysis {

namespace fs = std::filesystem;

namespace {

bool is_executable(const std::string& p) { return ::access(p.c_str(), X_OK) == 0 && !fs::is_directory(p); }

}  // namespace

int run_gnuplot(const std::string& gnuplot, const std::string& script_path, const std::string& log,
                const std::string& dir) {
  // The child enters `dir` before gnuplot opens the script: the script's own path must not be relative.
  const std::string script = fs::absolute(script_path).string();
  const pid_t pid = ::fork();
  if (pid < 0) fail("dpx plot: cannot start gnuplot: ", std::strerror(errno));
  if (pid == 0) {
    dpx::stop::unblock_signals_in_child();
    become_group_leader();  // ended with dpx on a signal (core/children.hpp)
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::execl(gnuplot.c_str(), gnuplot.c_str(), script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const ChildProcess listed(pid);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    dpx::stop::wait_while_stopping();  // ECHILD: reaped by stop::now, which ends dpx
    if (errno != EINTR) fail("dpx plot: waiting for gnuplot: ", std::strerror(errno));
  }
  dpx::stop::wait_while_stopping();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string file_text_of(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string find_executable(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return is_executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string p = (fs::path(dir.empty() ? "." : dir) / name).string();
    if (is_executable(p)) return p;
  }
  return "";
}

}  // namespace dpx::analysis
