// The dpx subcommands. Each add_*_command registers one CLI11 subcommand whose callback runs
// it; errors are thrown (dpx::UsageError -> exit 2, dpx::Error -> exit 1) and printed by main.
#pragma once
#include <CLI/CLI.hpp>

#include "parallel/runtime/process_group.hpp"

namespace dpx::tools {

// The commands that run ranks take the job's process group (MPI's world under mpirun or srun).
void add_train_command(CLI::App& app, parallel::ProcessGroup& processes);
void add_bench_command(CLI::App& app, parallel::ProcessGroup& processes);
void add_collective_command(CLI::App& app, parallel::ProcessGroup& processes);
void add_models_command(CLI::App& app);
void add_infer_command(CLI::App& app);
void add_fit_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_plot_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_study_command(CLI::App& app);
void add_data_command(CLI::App& app);
// The command line this process was started with, as one shell line ("dpx bench --models
// lenet5 ..."): the program named dpx whatever its path, arguments quoted where the shell needs
// it. main() sets it; `dpx bench` writes it to its --out folder (command.txt) for captions.
void set_command_line(int argc, char** argv);
const std::string& command_line();
// Versions of dpx and of the libraries built in, one "name version" per line; with MPI, the
// library and the thread level in use when `launch` is an MPI launch.
std::string version_text(const parallel::LaunchInfo& launch);

}  // namespace dpx::tools
