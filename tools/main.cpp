// dpx: the command line. Subcommands live in tools/cmd_*.cpp; this file only dispatches and
// turns errors into messages and exit codes (2: usage, 1: runtime).
#include <cstdio>
#include <exception>

#include "core/error.hpp"
#include "tools/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dpx: data-parallel training, measured natively (CPU threads, CUDA, MPI)", "dpx"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "print the versions of dpx and of the libraries built in");
  dpx::tools::add_train_command(app);
  dpx::tools::add_bench_command(app);
  dpx::tools::add_collective_command(app);
  dpx::tools::add_models_command(app);
  dpx::tools::add_infer_command(app);
  try {
    app.parse(argc, argv);
    if (show_version) {
      std::fputs(dpx::tools::version_text().c_str(), stdout);
      return 0;
    }
    if (app.get_subcommands().empty()) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "dpx: error: %s\nRun 'dpx --help' or 'dpx <command> --help' for usage.\n", e.what());
    return 2;
  } catch (const dpx::UsageError& e) {
    std::fprintf(stderr, "dpx: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpx: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
