// Writes what a run saw: steps.csv (one row per rank and step), summary.csv (one row),
// config.json (the options and the machine), and an optional Chrome trace. Every file is
// written atomically (temp file + rename), so a crash never leaves half a file.
#pragma once
#include <string>
#include <vector>

#include "parallel/bench/metrics.hpp"
#include "parallel/train/trainer.hpp"

namespace dpx::parallel {

void write_steps_csv(const std::string& path, const TrainReport& report);
std::string summary_csv_header();
std::string summary_csv_row(const TrainReport& report, const Summary& s);
void write_summary_csv(const std::string& path, const TrainReport& report, const Summary& s);
void write_config_json(const std::string& path, const TrainReport& report);
// Chrome trace (chrome://tracing, Perfetto): pid = rank, tid = phase, one slice per phase of
// each step in [first, last]. Phases are laid end to end from the step's start in the order
// load, forward, backward, comm_exposed, optimizer (comm_total drawn on its own track). Then the
// report's trace spans on tracks of their own: each DDP bucket's all-reduce (host backends),
// every op with --profile-ops, and each loader worker's batches.
void write_trace(const std::string& path, const TrainReport& report, int64_t first, int64_t last);

}  // namespace dpx::parallel
