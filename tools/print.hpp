// What dpx prints for people: the boxed configuration table at the start of a run, the
// phase and efficiency table at its end, and warnings about the machine.
#pragma once
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "parallel/runtime/launch_info.hpp"
#include "parallel/bench/metrics.hpp"
#include "parallel/train/train_options.hpp"
#include "parallel/train/trainer.hpp"

namespace dpx::tools {

void print_config_box(std::ostream& os, const parallel::TrainOptions& o, const parallel::LaunchInfo& launch);
// The rows an MPI launch adds to that table (ranks and nodes, library, clocks); none otherwise.
std::vector<std::pair<std::string, std::string>> launch_rows(const parallel::LaunchInfo& launch);
// The optimizer row of that table: "SGD lr 0.05 momentum 0.9 wd 0 nesterov", "AdamW lr 0.001 ...".
std::string optimizer_text(const parallel::TrainOptions& o);
void print_summary(std::ostream& os, const parallel::TrainReport& report, const parallel::Summary& s);
// The data loader's line: its workers, their throughput (images per second of a worker's own work),
// the share of the steps spent waiting for batches, the images skipped; and on stderr the warning
// that loading is the bottleneck (the load phase over kLoadBottleneckShare of the step), naming
// --workers.
inline constexpr double kLoadBottleneckShare = 0.10;
void print_loader(std::ostream& os, const parallel::TrainReport& report, const parallel::Summary& s);
// --verbose: what each CPU convolution shape ran and why (kernels/cpu/conv2d_algos.hpp); nothing
// where no CPU convolution ran (one line where dpx's own kernels run them all).
void print_conv_choices(std::ostream& os);
// More ranks (or rank threads) than cores is allowed (the studies did it: docs/ARCHITECTURE.md,
// Studies) but is said on stderr.
void warn_if_oversubscribed(const parallel::TrainOptions& o, const parallel::LaunchInfo& launch);
int hardware_threads();

}  // namespace dpx::tools
