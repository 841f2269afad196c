// Summary metrics of a training run, every one with its definition (README.md, "Metrics"):
// mean phase times over the measured steps (warm-up excluded), throughput, POP efficiencies,
// bytes communicated (formula and counted), and scaling against a baseline run.
#pragma once
#include <array>
#include <cstdint>

#include "core/phase_timer.hpp"
#include "parallel/trainer.hpp"

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
  double bytes_per_epoch_formula = 0;        // N / (B·k) · trainable params · 4 bytes
  double bytes_per_epoch_counted = 0;        // bytes rank 0 sent per step × steps per epoch
  double final_loss = 0;                     // mean loss of the last epoch (rank 0)
  double test_accuracy = -1;                 // after the last epoch; -1 if not evaluated
  // Filled by with_baseline():
  double speedup = 1, scaling_efficiency = 1;
};

Summary summarize(const TrainReport& report);
// Speedup = throughput / baseline throughput. Strong scaling (same global batch): efficiency =
// speedup / k. Weak scaling (same per-rank batch): efficiency = throughput / (k × baseline).
// Both reduce to speedup / (k / k_baseline).
void with_baseline(Summary& s, const Summary& baseline);

}  // namespace dpx::parallel
