// Runs dpx (under mpirun, or alone) from a test, and controls such a run from outside as a user
// or a scheduler would: start it in the background, wait for its progress lines, find rank R's
// process, send it a signal, and time how long the job takes to end. DPX_MPIEXEC and its flags
// come from CMake (FindMPI), where MPI is built.
#pragma once
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "run_dpx.hpp"
#include "tests/common/files.hpp"

using dpx::testing::file_text;

#ifdef DPX_MPIEXEC
inline std::string mpirun(int np) {
  return std::string(DPX_MPIEXEC) + " " + DPX_MPIEXEC_FLAGS + " -np " + std::to_string(np) + " ";
}
#endif

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A job started in the background, its output (stdout and stderr) going to a file.
class BackgroundJob {
 public:
  BackgroundJob(const std::string& command, std::filesystem::path output) : output_(std::move(output)) {
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      setpgid(0, 0);  // its own process group: the test can end everything it started
      const std::string line = "exec " + command + " > '" + output_.string() + "' 2>&1";
      execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    setpgid(pid_, pid_);
    start_ = std::chrono::steady_clock::now();
  }
  ~BackgroundJob() {
    if (!done_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Waits until the output holds `count` lines containing `text`; false after `timeout_s`.
  bool wait_for_lines(const std::string& text, int count, double timeout_s) {
    auto enough = [&] {
      const std::string out = file_text(output_);
      int n = 0;
      for (size_t at = out.find(text); at != std::string::npos; at = out.find(text, at + 1)) ++n;
      return n >= count;
    };
    for (auto t = std::chrono::steady_clock::now(); seconds_since(t) < timeout_s;) {
      if (enough()) return true;
      if (finished(0.05)) return enough();  // what it wrote before it ended counts
    }
    return false;
  }

  // The pid of the rank whose OMPI_COMM_WORLD_RANK (Open MPI's mpirun: a child of it) or PMI_RANK
  // (MPICH's mpiexec: a child of its proxy) is `rank`, or -1.
  int rank_pid(int rank) const {
    const std::string ompi = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank), pmi = "PMI_RANK=" + std::to_string(rank);
    DIR* proc = opendir("/proc");
    int found = -1;
    while (dirent* e = proc ? readdir(proc) : nullptr) {
      const int pid = std::atoi(e->d_name);
      if (pid <= 0 || (parent_of(pid) != pid_ && parent_of(parent_of(pid)) != pid_)) continue;
      std::string env = file_text("/proc/" + std::to_string(pid) + "/environ");
      for (size_t at = 0; at < env.size();) {
        const size_t end = std::min(env.find('\0', at), env.size());
        const std::string var = env.substr(at, end - at);
        if (var == ompi || var == pmi) found = pid;
        at = end + 1;
      }
    }
    if (proc) closedir(proc);
    return found;
  }

  // Waits up to `timeout_s` for the job to end; true if it did (exit_code() then holds its code).
  bool finished(double timeout_s) {
    if (done_) return true;
    for (auto t = std::chrono::steady_clock::now();;) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        done_ = true;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
      }
      if (seconds_since(t) >= timeout_s) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  int exit_code() const { return code_; }
  std::string output() const { return file_text(output_); }
  // Kills every process the job started (what remains after a failed test).
  void kill_all() { kill(-pid_, SIGKILL); }
  // Sends `signal` to the job's own process (the command, which the shell exec'd).
  void signal_job(int signal) { kill(pid_, signal); }
  pid_t pid() const { return pid_; }

 private:
  // The parent of process `pid`, or -1.
  static int parent_of(int pid) {
    if (pid <= 0) return -1;
    const std::string stat = file_text("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) return -1;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    int ppid = -1;
    rest >> state >> ppid;
    return ppid;
  }

  std::filesystem::path output_;
  pid_t pid_ = -1;
  bool done_ = false;
  int code_ = -1;
  std::chrono::steady_clock::time_point start_;
};
