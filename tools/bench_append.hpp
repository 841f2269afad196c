// dpx bench --append: more repeats of the same sweep into the folder of an earlier one. The
// earlier runs are read back from runs.csv (one row per run, in the sweep's order), so that
// results.csv's medians, intervals and flags are over every run, old and new.
#pragma once
#include <string>
#include <vector>

#include "parallel/bench/metrics.hpp"
#include "parallel/train/trainer.hpp"

namespace dpx::tools {

struct EarlierRuns {
  int runs = 0;                                             // repeats already made
  std::vector<std::vector<parallel::Summary>> summaries;    // per configuration, per run
  std::vector<std::vector<parallel::TrainReport>> reports;  // the same: configuration, wall time (no steps)
  std::string runs_csv;                                     // the earlier runs.csv, whole
  std::string ops_csv;  // the earlier ops.csv (--profile-ops) whole, in this dpx's columns; "" when none
};

// Reads the earlier run in `dir` for `configs` (this sweep's, in its order), made by `command`
// (the earlier command.txt must say the same but for --append, --force and --repeat). Throws
// UsageError naming the folder when there is no earlier run, or another sweep's.
EarlierRuns read_earlier_runs(const std::string& dir, const std::string& command,
                              const std::vector<parallel::TrainOptions>& configs);

}  // namespace dpx::tools
