// Runs the dpx binary built with the tests (DPX_BINARY), or any command line, and returns its
// exit code and its output, stdout and stderr together: the end-to-end tests share it.
#pragma once
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

struct DpxResult {
  int code;
  std::string output;
};

// Runs a shell command line; its exit code and output (stdout and stderr together).
inline DpxResult run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline DpxResult run_dpx(const std::string& args) { return run_command(std::string(DPX_BINARY) + " " + args); }
