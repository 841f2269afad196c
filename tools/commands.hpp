// The dpx subcommands. Each add_*_command registers one CLI11 subcommand whose callback runs
// it; errors are thrown (dpx::UsageError -> exit 2, dpx::Error -> exit 1) and printed by main.
#pragma once
#include <CLI/CLI.hpp>

namespace dpx::tools {

void add_train_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_collective_command(CLI::App& app);
void add_models_command(CLI::App& app);
void add_infer_command(CLI::App& app);
// Versions of dpx and of the libraries built in, one "name version" per line.
std::string version_text();

}  // namespace dpx::tools
