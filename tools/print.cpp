// What dpx prints for people (see print.hpp): the configuration box, the summary table and the
// warnings about the machine.
#include "tools/print.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "core/cpu_use.hpp"
#include "kernels/cpu/conv2d_algos.hpp"
#include "parallel/runtime/stall_report.hpp"
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

std::vector<std::pair<std::string, std::string>> launch_rows(const parallel::LaunchInfo& launch) {
  if (launch.backend != "mpi") return {};
  // "vm: 0-3; node-b: 4-7": the ranks of each node.
  std::vector<std::pair<std::string, std::vector<int>>> by_host;
  for (int r = 0; r < launch.ranks; ++r) {
    const std::string& host = launch.hosts[static_cast<size_t>(r)];
    auto it = std::find_if(by_host.begin(), by_host.end(), [&](const auto& h) { return h.first == host; });
    if (it == by_host.end()) by_host.push_back({host, {r}});
    else it->second.push_back(r);
  }
  std::string where;
  for (const auto& [host, ranks] : by_host)
    where += (where.empty() ? "" : "; ") + host + ": " + parallel::rank_list(ranks);
  double offset = 0, uncertainty = 0;
  for (size_t r = 0; r < launch.clock_offset_s.size(); ++r) {
    offset = std::max(offset, std::abs(launch.clock_offset_s[r]));
    uncertainty = std::max(uncertainty, launch.clock_uncertainty_s[r]);
  }
  char clocks[160];
  std::snprintf(clocks, sizeof clocks, "on rank 0's: offsets up to %.1f us, each known within %.1f us", offset * 1e6,
                uncertainty * 1e6);
  return {
      {"processes", std::to_string(launch.ranks) + (launch.ranks == 1 ? " MPI rank on " : " MPI ranks on ") +
                        std::to_string(launch.nodes) + " node" +
                        (launch.nodes > 1 ? "s" : "") + " (" + where + ")"},
      {"launcher", launch.launcher},
      {"mpi", launch.library + ", " + launch.thread_level},
      {"clocks", clocks},
  };
}

void print_config_box(std::ostream& os, const parallel::TrainOptions& o, const parallel::LaunchInfo& launch) {
  const bool mpi = launch.backend == "mpi";
  const int threads = o.threads ? o.threads : mpi ? launch.cores_per_rank : hardware_threads();
  std::vector<std::pair<std::string, std::string>> rows = {
      {"model", o.model + (o.head != "default" ? ", head " + o.head : "") +
                    (o.freeze_backbone ? ", backbone frozen" : "") +
                    (o.weights_file.empty() ? "" : ", weights " + o.weights_file)},
      {"dataset", o.dataset + (o.data_dir.empty() ? "" : " (" + o.data_dir + ")")},
      {"devices", mpi ? o.devices + " (one rank per MPI process)" : o.devices},
      {"parallel", std::string(choice_name(parallel::kParallelModes, o.parallel)) +
                       (o.parallel == parallel::ParallelMode::ddp ? " (algo " + std::string(parallel::algorithm_name(o.algo)) + ", bucket " +
                                                                         std::to_string(o.bucket_mb).substr(0, 5) + " MiB" +
                                                                         (o.overlap ? "" : ", no overlap") + ")"
                                                                   : "")},
      {"batch size", std::to_string(o.batch_size) + " global, " + std::to_string(o.batch_size / o.ranks()) + " per rank"},
      {"epochs", std::to_string(o.epochs) + (o.max_steps ? " (" + std::to_string(o.max_steps) + " steps each)" : "")},
      {"optimizer", optimizer_text(o)},
      {"threads", mpi ? std::to_string(threads) + " per rank (" +
                            (o.threads ? "--threads" : launch.bound ? "the cores the launcher bound it to"
                                                                    : "its node's cores shared by its ranks") +
                            "; " + std::to_string(hardware_threads()) + " hardware threads per node)"
                      : std::to_string(threads) + " of " + std::to_string(hardware_threads()) + " hardware threads"},
      {"seed", std::to_string(o.seed)},
  };
  const std::optional<parallel::LossScaleOptions> scaling = o.loss_scaling();
  if (o.precision != parallel::Precision::fp32 || o.grad_dtype != DType::f32 || scaling) {
    std::ostringstream text;
    text << std::setprecision(10) << choice_name(parallel::kPrecisions, o.precision) << " compute, fp32 weights, "
         << choice_name(parallel::kGradDtypes, o.grad_dtype) << " gradient all-reduce";
    if (scaling && scaling->dynamic)
      text << ", dynamic loss scale from " << scaling->init_scale << " (x2 after " << scaling->growth_interval
           << " good updates)";
    else if (scaling)
      text << ", loss scale " << scaling->init_scale;
    rows.emplace_back("precision", text.str());
  }
  if (o.memory_format == ops::MemoryFormat::channels_last)
    rows.emplace_back("memory format", "channels_last: the model's image maps are (N, H, W, C)");
  for (auto& row : launch_rows(launch)) rows.push_back(std::move(row));
  std::istringstream versions(version_text(launch));
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

void print_conv_choices(std::ostream& os) {
  const std::vector<cpu::ConvChoice> choices = cpu::conv_choices();
  if (cpu::conv_algo() == cpu::ConvAlgo::dpx || !cpu::onednn_available()) {
    os << "CPU convolutions (--conv-algo " << cpu::conv_algo_name(cpu::conv_algo()) << "): dpx's own kernels for every shape"
       << (cpu::onednn_available() ? "" : " (built without oneDNN)") << "\n";
    return;
  }
  if (choices.empty()) return;
  os << "CPU convolutions (--conv-algo " << cpu::conv_algo_name(cpu::conv_algo()) << "): shape NxCxHxW -> K kernel, pass, "
     << "algorithm, why\n";
  for (const cpu::ConvChoice& c : choices)
    os << "  " << c.shape << "  " << c.pass << "  " << c.algo << "  (" << c.why << "; " << c.threads << " thread"
       << (c.threads == 1 ? "" : "s") << (c.nested ? ", in a thread rank" : "") << ")\n";
}

void print_loader(std::ostream& os, const parallel::TrainReport& report, const parallel::Summary& s) {
  const data::LoaderStats& l = report.loader;
  if (l.images == 0) return;
  const parallel::TrainOptions& o = report.options;
  const double step = s.mean_s[static_cast<int>(Phase::step)], load = s.mean_s[static_cast<int>(Phase::load)];
  const double share = step > 0 ? load / step : 0;
  char line[320];
  std::snprintf(line, sizeof line,
                "loader: %d worker(s) per rank; %.1f images/s per worker (reading, decoding, transforming%s); the "
                "steps waited %.1f %% of their time for batches (load %.3f ms a step)\n",
                o.workers, l.images_per_worker_s(), o.device().is_cuda() ? ", copying to the GPU" : "", 100 * share,
                load * 1e3);
  os << line;
  if (l.skipped > 0)
    os << "loader: " << l.skipped << " unreadable image(s) skipped (--on-bad-image skip): dpx data check "
       << o.data_dir << " lists them\n";
  if (share > kLoadBottleneckShare && s.measured_steps > 0) {
    const int cores = hardware_threads();
    std::string what;
    if (o.workers == 0)
      what = "--workers 0 loads in the training thread: pass --workers 2 or more";
    else if (o.workers * o.ranks() < cores)
      what = "raise --workers (" + std::to_string(o.workers) + " per rank now, " + std::to_string(cores) +
             " hardware threads here)";
    else
      what = "every hardware thread already loads or trains: more --workers will not help here; use a smaller "
             "--image-size, JPEGs scaled down ahead of time, or a machine with more cores";
    std::fprintf(stderr, "dpx: warning: loading is the bottleneck: the steps waited %.0f %% of their time for their "
                 "batches; %s\n", 100 * share, what.c_str());
  }
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
  {
    // Host marks are the process's: thread ranks share one heap, MPI ranks each have their own.
    const bool shared = report.ranks > 1 && report.launch.backend != "mpi";
    std::snprintf(line, sizeof line, "peak memory%s: host %.1f MB allocated (live tensors), %.1f MB reserved (held by "
                  "dpx's allocator)", shared ? " of the process (its ranks together)" : " per rank",
                  static_cast<double>(s.memory.host_allocated) / 1e6, static_cast<double>(s.memory.host_reserved) / 1e6);
    os << line;
    if (s.memory.device_reserved > 0) {
      std::snprintf(line, sizeof line, "; GPU %.1f MB allocated, %.1f MB reserved (the largest of any rank's GPU)",
                    static_cast<double>(s.memory.device_allocated) / 1e6, static_cast<double>(s.memory.device_reserved) / 1e6);
      os << line;
    }
    os << "\n";
  }
  if (s.other_cpu_share >= 0) {
    std::snprintf(line, sizeof line, "machine: other processes took %.0f %% of this run's cores during its measured steps%s\n",
                  100 * s.other_cpu_share, disturbed(s.other_cpu_share) ? " (disturbed)" : "");
    os << line;
    if (disturbed(s.other_cpu_share))
      std::fprintf(stderr, "dpx: warning: other processes took %.0f %% of the cores this run used during its measured "
                   "steps: its times are the busy machine's, not dpx's; `top` shows who, and a quiet machine gives "
                   "this run's real times%s\n", 100 * s.other_cpu_share,
                   report.threads_per_rank > 1 ? " (on a shared machine, --omp-wait passive lets the OpenMP threads "
                                                 "yield the cores at once)" : "");
  }
  if (report.ranks > 1) {
    const int a = report.options.accumulate;
    const std::string steps = a > 1 ? "ceil(N/(B*k*" + std::to_string(a) + "))" : "N/(B*k)";
    std::snprintf(line, sizeof line, "bytes per epoch: %.3g (formula %s*params*%zu), %.3g (counted, rank 0 sent)\n",
                  s.bytes_per_epoch_formula, steps.c_str(), dtype_size(report.options.grad_dtype),
                  s.bytes_per_epoch_counted);
    os << line;
  }
  if (report.options.loss_scaling()) {
    // Rank 0's records: every rank scales and skips alike.
    int64_t updates = 0, skipped = 0;
    float last_scale = 1;
    for (const parallel::StepRecord& r : report.steps) {
      if (r.rank != 0 || !r.optimizer_step) continue;
      ++updates;
      skipped += r.update_skipped ? 1 : 0;
      last_scale = r.loss_scale;
    }
    std::ostringstream text;
    text << "loss scale " << std::setprecision(10) << last_scale << " at the last update; " << skipped << " of "
         << updates << " updates skipped (inf/NaN gradients)\n";
    os << text.str();
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

void warn_if_oversubscribed(const parallel::TrainOptions& o, const parallel::LaunchInfo& launch) {
  const int cores = hardware_threads();
  if (!o.device().is_cpu()) return;
  if (launch.backend == "mpi") {  // rank 0's node: its ranks times their threads
    int local = 0;
    for (int node : launch.node_of_rank) local += node == launch.node_of_rank.front() ? 1 : 0;
    const int threads = o.threads ? o.threads : launch.cores_per_rank;
    if (local * threads > cores)
      std::cerr << "dpx: warning: " << local << " ranks x " << threads << " threads on " << cores
                << " hardware threads of " << launch.hosts.front()
                << ": ranks will share cores, so times include waiting for a core\n";
    return;
  }
  if (o.ranks() > cores)
    std::cerr << "dpx: warning: " << o.ranks() << " ranks on " << cores
              << " hardware threads: ranks will share cores, so times include waiting for a core\n";
}

}  // namespace dpx::tools
