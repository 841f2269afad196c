// The command line of this process as one shell line, for the files that say what made them.
#include <string>

#include "tools/commands.hpp"

namespace dpx::tools {

namespace {

std::string& stored() {
  static std::string line = "dpx";
  return line;
}

// A word as the shell reads it back: bare when it is made of safe characters, else in single quotes.
std::string quoted(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                              "@%+=:,./-_") == std::string::npos)
    return word;
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

void set_command_line(int argc, char** argv) {
  std::string line = "dpx";  // not argv[0]: the build folder's path is not part of the command
  for (int i = 1; i < argc; ++i) line += " " + quoted(argv[i]);
  stored() = line;
}

const std::string& command_line() { return stored(); }

}  // namespace dpx::tools
