// The command line of this process as one shell line, for the files that say what made them.
#include <string>

#include "core/quote.hpp"
#include "tools/commands.hpp"

namespace dpx::tools {

namespace {

std::string& stored() {
  static std::string line = "dpx";
  return line;
}

}  // namespace

void set_command_line(int argc, char** argv) {
  std::string line = "dpx";  // not argv[0]: the build folder's path is not part of the command
  for (int i = 1; i < argc; ++i) line += " " + shell_quote(argv[i]);
  stored() = line;
}

const std::string& command_line() { return stored(); }

}  // namespace dpx::tools
