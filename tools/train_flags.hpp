// The command-line flags shared by `dpx train` and `dpx bench`, bound to a TrainOptions.
#pragma once
#include <CLI/CLI.hpp>

#include "parallel/runtime/process_group.hpp"
#include "parallel/train/train_options.hpp"
#include "tools/image_flags.hpp"

namespace dpx::tools {

// The flags as given; apply_train_flags parses those that name a choice into the options' enums.
struct TrainFlags {
  std::string parallel;  // empty: ddp for an MPI job of several processes, else none
  std::string backend;   // empty: threads for thread ranks, mpi under mpirun
  std::string algo = "ring", precision = "fp32", grad_dtype = "fp32", loss_scale = "auto", on_nonfinite = "stop",
              lr_schedule = "cosine", memory_format = "contiguous";
  std::string trace_steps = "0:20";
  bool no_overlap = false;
  bool no_eval = false;
  bool weights_non_strict = false;
  std::string betas;  // AdamW's "B1,B2"; empty: not given
  // Set when the flag is given, so that flags of the other optimizer can be refused.
  bool momentum_given = false, nesterov_given = false, eps_given = false;
  bool loss_scale_tuning_given = false;  // --initial-loss-scale or --loss-scale-window
  bool force = false;                    // --force: replace existing outputs dpx did not write
  bool profile_ops = false;              // dpx train --profile-ops (dpx bench has its own: a table per run)
  bool profile_shapes = false;           // --profile-shapes: --profile-ops counted per call shape
  std::string memory_budget;             // dpx train --memory-budget: the host block cache's reserve limit
  ImageFlags images;                     // image folders' list flags (--crop-scale, --mean, ...)
  std::string omp_wait = "default";      // --omp-wait: main() acted on it before the command line was parsed
};

// --omp-wait active|passive sets OMP_WAIT_POLICY, which the OpenMP library reads once, as the
// program loads: where it is not yet what was asked, dpx runs itself again with it set (execv
// of /proc/self/exe, the same arguments). Called first thing in main(); returns only when nothing
// had to change. "default" (or no flag) leaves the environment as it is.
void apply_omp_wait(int argc, char** argv);

// The help of the flags that dpx bench takes as lists (train_flags.cpp, tools/cmd_bench.cpp).
std::string algo_help();
inline constexpr const char* kGradDtypeHelp =
    "dtype of DDP's gradient all-reduce: fp32, bf16 or fp16 (half the bytes; each rank divides by the number of "
    "ranks before the sum, and the result is widened back into the fp32 gradients)";
inline constexpr const char* kOptimizerHelp =
    "sgd (torch.optim.SGD) or adamw (torch.optim.AdamW: decoupled weight decay, amsgrad off)";
inline constexpr const char* kBucketMbHelp = "DDP gradient bucket size in MiB (0: one all-reduce per tensor)";
inline constexpr const char* kConvAlgoHelp =
    "CPU convolutions: auto (oneDNN's Winograd for 3x3 stride-1 shapes on planes of 14x14 and more, its direct "
    "convolution for the others, dpx's own kernels for depthwise ones, two backward shapes where they are "
    "faster (stems on large planes, 1024+ channels on tiny planes) and inside thread ranks of several threads; "
    "the same every run), search (time each candidate on a shape's first call, keep the fastest; two runs may "
    "differ in the last bits), onednn (direct only: PyTorch's arithmetic), winograd (wherever it applies), or dpx "
    "(dpx's own kernels: results bitwise independent of --threads). docs/kernels.md, CPU kernels";
inline constexpr const char* kAccumulateHelp = "synchronise gradients every k micro-steps";

// Adds the model/data/optimiser/execution flags to `cmd`. `for_bench` leaves out the flags
// that bench sweeps itself (model, batch size, devices, parallel, algo, bucket-mb, accumulate,
// optimizer, workers).
void add_train_flags(CLI::App& cmd, parallel::TrainOptions& o, TrainFlags& f, bool for_bench);
// Copies the string flags into `o` (parses --parallel, --trace-steps, ...). Set o.process_ranks
// first: the default of --parallel depends on it.
void apply_train_flags(parallel::TrainOptions& o, const TrainFlags& f);
// For options read into unsigned integers, which would take "-1" as 2^64 - 1 without a word.
CLI::Validator non_negative();
// For output paths: an empty one is refused (an empty --out once meant the root of the file system).
CLI::Validator output_path();

// dpx train's outputs (core/output_files.hpp): steps.csv, summary.csv and config.json in --out,
// --trace and --save may replace only files dpx wrote as those kinds (unless --force), and none may
// be --weights, --resume or another of them. Throws a usage error naming the flag.
void check_train_outputs(const parallel::TrainOptions& o, const TrainFlags& f);

// What a rank brings to the start-up agreement of an MPI job: the command, dpx's version and
// the options that must be the same on every rank.
parallel::StartReport start_report(const std::string& command,
                                   std::vector<std::pair<std::string, std::string>> options);

}  // namespace dpx::tools
