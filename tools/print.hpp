// What dpx prints for people: the boxed configuration table at the start of a run, the
// phase and efficiency table at its end, and warnings about the machine.
#pragma once
#include <ostream>

#include "parallel/metrics.hpp"
#include "parallel/train_options.hpp"
#include "parallel/trainer.hpp"

namespace dpx::tools {

void print_config_box(std::ostream& os, const parallel::TrainOptions& o);
void print_summary(std::ostream& os, const parallel::TrainReport& report, const parallel::Summary& s);
// More ranks than cores is allowed (the studies did it) but is said on stderr.
void warn_if_oversubscribed(const parallel::TrainOptions& o);
int hardware_threads();

}  // namespace dpx::tools
