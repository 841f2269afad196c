// dpx: the command line. Subcommands live in tools/cmd_*.cpp; this file joins the job's process
// group (MPI's world under mpirun or srun, else this process alone), dispatches, and turns errors
// into messages and exit codes (2: usage, 1: runtime). Under MPI an error is settled with the
// other ranks: before they agreed to start, every rank learns it and all leave with one message;
// after, the rank that failed prints it and ends the whole job.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <system_error>

#include "core/error.hpp"
#include "core/stop.hpp"
#include "parallel/comm/algorithms/algorithms.hpp"
#include "parallel/runtime/process_group.hpp"
#include "tools/commands.hpp"
#include "tools/train_flags.hpp"

namespace {

// An error on this rank, as the user should see it and the exit code it gets.
int report_error(dpx::parallel::ProcessGroup& processes, int code, const std::string& message) {
  if (!processes.launched()) {
    std::fprintf(stderr, "dpx: error: %s\n", message.c_str());
    return code;
  }
  if (!processes.agreed()) {
    try {
      processes.agree({code, message, {}});
    } catch (const dpx::parallel::SharedFailure& all) {
      if (processes.rank() == 0) std::fprintf(stderr, "dpx: error: %s\n", all.what());
      return all.exit_code;
    }
  }
  const auto& info = processes.info();
  std::fprintf(stderr, "dpx: error: rank %d of %d (%s): %s\n", processes.rank(), processes.size(),
               info.hosts.empty() ? "" : info.hosts[static_cast<size_t>(processes.rank())].c_str(), message.c_str());
  processes.abort(code);
  return code;  // not reached: abort ends the job
}

}  // namespace

int main(int argc, char** argv) {
  dpx::tools::apply_omp_wait(argc, argv);  // may run dpx again, before anything starts
  dpx::tools::set_command_line(argc, argv);
  dpx::stop::install_handlers();  // under MPI the group's watchdog takes the signals over
  std::unique_ptr<dpx::parallel::ProcessGroup> processes;
  try {
    processes = dpx::parallel::join_process_group(argc, argv);
  } catch (const dpx::UsageError& e) {
    std::fprintf(stderr, "dpx: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpx: error: %s\n", e.what());
    return 1;
  }
  // What this binary can run on, as built (dpx --version says which libraries).
#ifdef DPX_WITH_CUDA
  constexpr bool with_cuda = true;
#else
  constexpr bool with_cuda = false;
#endif
  const std::string backends =
      std::string("CPU threads") + (with_cuda ? ", CUDA" : "") + (dpx::parallel::kMpiBuilt ? ", MPI" : "");
  CLI::App app{"dpx: data-parallel training, measured natively (" + backends + ")", "dpx"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "print the versions of dpx and of the libraries built in");
  dpx::tools::add_train_command(app, *processes);
  dpx::tools::add_bench_command(app, *processes);
  dpx::tools::add_collective_command(app, *processes);
  dpx::tools::add_models_command(app);
  dpx::tools::add_infer_command(app);
  dpx::tools::add_fit_command(app);
  dpx::tools::add_predict_command(app);
  dpx::tools::add_plot_command(app);
  dpx::tools::add_report_command(app);
  dpx::tools::add_study_command(app);
  dpx::tools::add_data_command(app);
  // Only train, bench and collective are SPMD programs: any other command started by mpirun or
  // srun on several processes would run once per process, all writing the same files (a study's
  // steps then waited on each other). Refused at once, by every rank alike.
  if (processes->launched() && processes->size() > 1) {
    for (int i = 1; i < argc; ++i) {
      const std::string word = argv[i];
      if (word.empty() || word[0] == '-') continue;
      if (word == "train" || word == "bench" || word == "collective") break;
      if (word == "models" || word == "infer" || word == "fit" || word == "predict" || word == "plot" ||
          word == "report" || word == "study" || word == "data")
        return report_error(*processes, 2,
                            "dpx " + word + " is not an MPI program: it runs once, on one process; run it without "
                            "mpirun or srun (or with -np 1). Only dpx train, bench and collective run as a job of "
                            "several processes");
      break;
    }
  }
  try {
    app.parse(argc, argv);
    if (show_version) {
      std::fputs(dpx::tools::version_text(processes->info()).c_str(), stdout);
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
    return report_error(*processes, 2,
                        std::string(e.what()) + "\nRun 'dpx --help' or 'dpx <command> --help' for usage.");
  } catch (const dpx::stop::Stopped& e) {  // the command saved what it could and said so
    return 128 + e.signal;
  } catch (const dpx::parallel::SharedFailure& e) {  // every rank has it: rank 0 says it, all leave
    if (processes->rank() == 0) std::fprintf(stderr, "dpx: error: %s\n", e.what());
    return e.exit_code;
  } catch (const dpx::UsageError& e) {
    return report_error(*processes, 2, e.what());
  } catch (const std::bad_alloc&) {
    return report_error(*processes, 1,
                        "out of memory: lower --batch-size, --image-size, --workers or the number of ranks, pick a "
                        "smaller model, or free memory on this machine");
  } catch (const std::system_error& e) {
    if (e.code() == std::errc::resource_unavailable_try_again)
      return report_error(*processes, 1,
                          std::string("could not start a thread (") + e.what() +
                              "): lower --threads, --workers or the number of ranks");
    return report_error(*processes, 1, e.what());
  } catch (const std::exception& e) {
    return report_error(*processes, 1, e.what());
  }
  return 0;
}
