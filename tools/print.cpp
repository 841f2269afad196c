#include "tools/print.hpp"

#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "tools/commands.hpp"

namespace dpx::tools {

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

std::string optimizer_text(const parallel::TrainOptions& o) {
  std::ostringstream os;  // shortest round-trip form: 0.001, 1e-08, 0.05
  os << (o.optimizer == "adamw" ? "AdamW" : "SGD") << " lr " << o.effective_lr();
  if (o.optimizer == "adamw")
    os << " betas " << o.beta1 << "," << o.beta2 << " eps " << o.eps;
  else
    os << " momentum " << o.momentum;
  os << " wd " << o.effective_weight_decay();
  if (o.optimizer != "adamw" && o.nesterov) os << " nesterov";
  return os.str();
}

void print_config_box(std::ostream& os, const parallel::TrainOptions& o) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"model", o.model + (o.head != "default" ? ", head " + o.head : "") +
                    (o.freeze_backbone ? ", backbone frozen" : "") +
                    (o.weights_file.empty() ? "" : ", weights " + o.weights_file)},
      {"dataset", o.dataset + (o.data_dir.empty() ? "" : " (" + o.data_dir + ")")},
      {"devices", o.devices},
      {"parallel", parallel::parallel_mode_name(o.parallel) +
                       (o.parallel == parallel::ParallelMode::ddp ? " (algo " + o.algo + ", bucket " +
                                                                         std::to_string(o.bucket_mb).substr(0, 5) + " MiB" +
                                                                         (o.overlap ? "" : ", no overlap") + ")"
                                                                   : "")},
      {"batch size", std::to_string(o.batch_size) + " global, " + std::to_string(o.batch_size / o.ranks()) + " per rank"},
      {"epochs", std::to_string(o.epochs) + (o.max_steps ? " (" + std::to_string(o.max_steps) + " steps each)" : "")},
      {"optimizer", optimizer_text(o)},
      {"threads", (o.threads ? std::to_string(o.threads) : std::to_string(hardware_threads())) + " of " +
                      std::to_string(hardware_threads()) + " hardware threads"},
      {"seed", std::to_string(o.seed)},
  };
  std::istringstream versions(version_text());
  for (std::string line; std::getline(versions, line);) {
    auto sp = line.find(' ');
    rows.emplace_back(line.substr(0, sp), sp == std::string::npos ? "" : line.substr(sp + 1));
  }
  size_t w0 = 0, w1 = 0;
  for (auto& [k, v] : rows) {
    w0 = std::max(w0, k.size());
    w1 = std::max(w1, v.size());
  }
  std::string bar = "+" + std::string(w0 + 2, '-') + "+" + std::string(w1 + 2, '-') + "+\n";
  os << bar;
  for (auto& [k, v] : rows)
    os << "| " << k << std::string(w0 - k.size(), ' ') << " | " << v << std::string(w1 - v.size(), ' ') << " |\n";
  os << bar;
}

void print_summary(std::ostream& os, const parallel::TrainReport& report, const parallel::Summary& s) {
  char line[160];
  os << "phase means over " << s.measured_steps << " measured steps per rank (" << report.options.warmup_steps
     << " warm-up steps excluded), averaged over " << report.ranks << " rank(s):\n";
  for (int p = 0; p < kPhaseCount; ++p) {
    std::snprintf(line, sizeof line, "  %-13s %10.3f ms\n", std::string(kPhaseNames[p]).c_str(), s.mean_s[p] * 1e3);
    os << line;
  }
  std::snprintf(line, sizeof line,
                "throughput %.1f img/s | load balance %.3f | comm efficiency %.3f | parallel efficiency %.3f\n",
                s.images_per_s, s.load_balance, s.comm_efficiency, s.parallel_efficiency);
  os << line;
  if (report.ranks > 1) {
    std::snprintf(line, sizeof line, "bytes per epoch: %.3g (formula N/(B*k)*params*4), %.3g (counted, rank 0 sent)\n",
                  s.bytes_per_epoch_formula, s.bytes_per_epoch_counted);
    os << line;
  }
  if (report.options.loss_threshold > 0) {
    if (report.threshold_step >= 0)
      os << "loss first below " << report.options.loss_threshold << " at global step " << report.threshold_step
         << " (epoch " << report.threshold_epoch + 1 << ")\n";
    else
      os << "loss never fell below " << report.options.loss_threshold << "\n";
  }
  if (s.test_accuracy >= 0) {
    std::snprintf(line, sizeof line, "final test accuracy %.2f %%\n", 100.0 * s.test_accuracy);
    os << line;
  }
}

void warn_if_oversubscribed(const parallel::TrainOptions& o) {
  int cores = hardware_threads();
  if (o.device().is_cpu() && o.ranks() > cores)
    std::cerr << "dpx: warning: " << o.ranks() << " ranks on " << cores
              << " hardware threads: ranks will share cores, so times include waiting for a core\n";
}

}  // namespace dpx::tools
