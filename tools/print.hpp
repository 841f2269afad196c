// What dpx prints for people: the boxed configuration table at the start of a run, the
// phase and efficiency table at its end, and warnings about the machine.
#pragma once
#include <ostream>
#include <string>

#include "parallel/metrics.hpp"
#include "parallel/train_options.hpp"
#include "parallel/trainer.hpp"

namespace dpx::tools {

void print_config_box(std::ostream& os, const parallel::TrainOptions& o);
// The optimizer row of that table: "SGD lr 0.05 momentum 0.9 wd 0 nesterov", "AdamW lr 0.001 ...".
std::string optimizer_text(const parallel::TrainOptions& o);
void print_summary(std::ostream& os, const parallel::TrainReport& report, const parallel::Summary& s);
// More ranks than cores is allowed (the studies did it) but is said on stderr.
void warn_if_oversubscribed(const parallel::TrainOptions& o);
int hardware_threads();

}  // namespace dpx::tools
