// Summary metrics of a training run, every one with its definition (docs/measuring.md, "Metrics"):
// mean phase times over the measured steps (warm-up excluded), throughput, POP efficiencies,
// bytes communicated (formula and counted), and scaling against a baseline run; and the `wait`
// phase, which only the records of every rank together give.
#pragma once
#include <array>
#include <cstdint>

#include "core/phase_timer.hpp"
#include "parallel/train/trainer.hpp"

namespace dpx::parallel {

struct Summary {
  int ranks = 1;
  int64_t measured_steps = 0;                // optimizer steps per rank counted in the means
  std::array<double, kPhaseCount> mean_s{};  // mean per step, averaged over ranks
  double images_per_s = 0;                   // global images / wall time of the measured steps
  // POP (Performance Optimisation and Productivity) standard metrics (docs/ARCHITECTURE.md,
  // Studies and references), with useful work per rank
  // U_r = forward + backward + optimizer time and runtime T = the slowest rank's step time:
  double load_balance = 1;                   // mean_r U_r / max_r U_r
  double comm_efficiency = 1;                // max_r U_r / T
  double parallel_efficiency = 1;            // load_balance × comm_efficiency = mean_r U_r / T
  double bytes_per_epoch_formula = 0;        // N / (B·k) · trainable params · bytes of --grad-dtype
  double bytes_per_epoch_counted = 0;        // bytes rank 0 sent per update × updates per epoch
  double final_loss = 0;                     // mean loss of the last epoch (rank 0)
  double test_accuracy = -1;                 // after the last epoch; -1 if not evaluated
  MemoryPeaks memory;                        // the highest high-water marks of any rank, warm-up included
  double other_cpu_share = -1;               // TrainReport's: what other processes took of the cores
  // Filled by with_baseline():
  double speedup = 1, scaling_efficiency = 1;
};

// The one definition of the `wait` phase (docs/measuring.md, "Phases"; core/phase_timer.hpp), for
// every trainer, filled in after the run from the records' ends of backward (all on one clock,
// rank 0's): on each step at which the ranks' gradients are reduced,
//   wait = the latest backward_end_s among the step's records − this record's backward_end_s,
// the time this rank (DataParallel: replica) idles until the slowest one has finished its
// compute; 0 on the other steps. The gradients are reduced on every optimizer step (DDP: the
// last micro-step of each --accumulate group) and, under DataParallel, on every step (the
// master sums the replicas' gradients after each backward).
void fill_wait_times(TrainReport& report);

Summary summarize(const TrainReport& report);
// Speedup = throughput / baseline throughput. Strong scaling (same global batch): efficiency =
// speedup / k. Weak scaling (same per-rank batch): efficiency = throughput / (k × baseline).
// Both reduce to speedup / (k / k_baseline).
void with_baseline(Summary& s, const Summary& baseline);

}  // namespace dpx::parallel
