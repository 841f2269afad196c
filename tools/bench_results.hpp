// A `dpx bench` sweep's configurations and what their runs measured, and what is made of them:
// results.csv (the medians over the runs, their confidence intervals and spread, the noisy and
// disturbed flags, speedup and scaling efficiency against the configuration with the fewest
// ranks) and the table printed at the end (tools/cmd_bench.cpp runs the sweep).
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "parallel/bench/metrics.hpp"
#include "parallel/train/trainer.hpp"
#include "tools/max_batch.hpp"

namespace dpx::tools {

// One configuration of the sweep and what its runs measured (rank 0 keeps the runs).
struct SweepConfig {
  parallel::TrainOptions o;
  std::string scaling, tag, key;  // key: the tag without the devices, which share a baseline
  bool search_batch = false;      // --batch-sizes max: the batch is found before the sweep
  MaxBatch max_batch;             // what the search found (budget 0: a batch given)
  std::vector<parallel::TrainReport> runs;  // without their step records
  std::vector<parallel::Summary> summaries;
};

// A run's steps file in --out/steps/: the configuration's tag, and the run's number when there are
// repeats.
std::string steps_file(const SweepConfig& c, int run, int repeat);

// results.csv from every configuration's runs so far: the medians and their statistics, speedup
// and efficiency of the medians against the baseline's (the first configuration of its key).
// `medians` gets one per configuration (a default Summary for one without runs yet).
std::string results_csv(const std::vector<SweepConfig>& configs, std::vector<parallel::Summary>& medians,
                        double noisy_spread);

// The phases and efficiencies of every configuration, one line each (milliseconds per step; the
// medians over the runs, with throughput's spread and the noisy flag).
void print_bench_table(std::ostream& os, const std::vector<SweepConfig>& configs,
                       const std::vector<parallel::Summary>& medians, int repeat, double noisy_spread);

}  // namespace dpx::tools
