// `dpx bench --batch-sizes max`: the largest per-rank batch of a configuration that trains within
// a memory budget. Two short runs at small batches measure the peak memory: the allocator's
// reserved high-water mark (the host's for CPU ranks, the largest rank's GPU's for GPU ranks) says
// whether a batch fits, the live tensors' high-water mark how much it needs (under the budget the
// host cache gives its free memory back rather than pass it, core/host_cache.hpp, so what it
// reserves stays near the budget for every batch that fits). A line through the live peaks
// predicts the batch that fills the budget less a headroom, and a run at that batch confirms it;
// one that comes out over the budget shrinks the batch by the line's slope and tries again, one
// whose live tensors are well under it (below 90 %) predicts again from the line through it, but never
// at or past a batch already over (it halves the gap instead), nor at more than 8 times the largest
// batch that fit (a line through small batches may be far off). At most six runs after the first
// two. Every run is short (a step or two), and none is larger than the line predicts fits nor 8
// times what fit, so the search is not the run that exhausts the machine.
#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "parallel/train/train_options.hpp"

namespace dpx::tools {

struct BatchPeak {
  int64_t batch = 0;        // per rank
  uint64_t peak_bytes = 0;  // reserved at the high-water mark: over the budget, the batch does not fit
  uint64_t live_bytes = 0;  // the live tensors' high-water mark (0: not measured, peak_bytes serves)
};

// The largest batch b >= 1 with a + slope·b <= budget·(1 - headroom), for the line through two
// measurements' live bytes (a.batch < b.batch); 0 when even a batch of 1 is over. A line that does not grow
// (the batch's memory lost in the noise of the rest) predicts 4 times its larger point: a step
// up from which the next line can be drawn, never a leap.
int64_t predict_max_batch(const BatchPeak& a, const BatchPeak& b, uint64_t budget, double headroom);

// "16GB", "512MB", "1.5GiB", "4096" (bytes); throws UsageError naming `flag`.
uint64_t parse_memory_size(const std::string& text, const std::string& flag);
// What --memory-budget defaults to: the memory a new allocation can have now (the host's
// MemAvailable; a GPU's free memory).
uint64_t available_memory(Device device);

// A memory budget on the host (--memory-budget): the host block cache holds at most `bytes`
// (core/tensor.hpp's reserve limit) and a convolution's Winograd scratch at most an eighth of it
// (kernels/cpu/conv2d_algos.hpp's workspace limit). Process-wide; before the first run.
void apply_host_memory_budget(uint64_t bytes);

struct MaxBatch {
  int64_t batch = 0;            // per rank; 0: none fits
  uint64_t peak_bytes = 0;      // measured at `batch`
  uint64_t budget = 0;
  int64_t predicted = 0;        // the line's first answer
  std::vector<BatchPeak> runs;  // every measured batch, in order
  std::string capped_by;        // "" or why the search stopped below the prediction (the data set)
};

// The search over `measure` (a batch per rank -> its peaks), batches at most `cap`: two small
// batches, then at most six more, never one at or above a batch already over the budget nor
// above 8 times the largest that fit.
MaxBatch search_max_batch(const std::function<BatchPeak(int64_t)>& measure, int64_t cap, uint64_t budget);

// The search for `o` (its model, devices, parallel mode and every other option; the batch is the
// search's), whose training set holds `train_samples` (synthetic sets grow with the batch instead).
// Progress lines go to `log`.
MaxBatch find_max_batch(const parallel::TrainOptions& o, int64_t train_samples, uint64_t budget, std::ostream& log);

}  // namespace dpx::tools
