// `dpx bench --profile-ops` and `dpx train --profile-ops`: the op profiler's totals of one run (kernels/op_profile.hpp) as a
// table on the terminal and as rows of ops.csv, against the run's measured steps.
#pragma once
#include <string>
#include <vector>

#include "kernels/op_profile.hpp"
#include "parallel/train/trainer.hpp"

namespace dpx::tools {

// The measured steps of a run as the op profiler saw them: this process's step records after the
// warmup (every rank's with thread ranks; under MPI this process's rank only, as its profiler
// counts only its own ops) and their step times summed.
struct MeasuredSteps {
  int64_t records = 0;
  double step_s = 0;
};
MeasuredSteps measured_steps(const parallel::TrainReport& report, int process_rank);

// One row per op, by total time: op, calls, total ms, ms per step (per step record: per rank and
// step), % of the measured step time, GFLOP/s ("-" where the op's FLOPs are not defined), the
// host's ms per step issuing it and the kernels it launched per step ("-": unknown); then the
// step's totals, its kernel count among them (a launch-bound model shows many kernels and host
// ms close to the GPU ms).
std::string op_table(const std::vector<ops::profile::OpStats>& ops, const MeasuredSteps& steps);

// --profile-ops times each op as it is launched and --cuda-graph replays a whole step as one
// launch: together, a usage error (dpx train and dpx bench alike).
void refuse_profile_ops_with_cuda_graph(bool profile_ops, bool cuda_graph);

// "memory high-water mark of the measured steps: 412.3 MB of live host tensors in use, reached in
// conv2d_backward" (the op profiler's peak_op), or "" when no counted op raised the mark.
std::string peak_op_line();

// ops.csv: the header, and one line per op prefixed with the configuration's tag and run.
std::string op_csv_header();
// An ops.csv's text in this dpx's columns: one written before the shape column (2026-11-28) gets
// an empty one on every row.
std::string op_csv_current(const std::string& text);
std::string op_csv_rows(const std::string& configuration, int run, const std::vector<ops::profile::OpStats>& ops,
                        const MeasuredSteps& steps);

}  // namespace dpx::tools
