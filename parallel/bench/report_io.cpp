// Writing a run's files (see report_io.hpp): steps.csv, summary.csv, config.json and the Chrome
// trace, each atomically.
#include "core/cpu_use.hpp"
#include "core/csv.hpp"
#include "core/output_files.hpp"
#include "parallel/bench/report_io.hpp"

#include <cstdlib>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "core/atomic_file.hpp"
#include "core/version_config.hpp"
#include "kernels/cpu/conv2d_algos.hpp"
#include "kernels/op_profile.hpp"

namespace dpx::parallel {

namespace {
const char* kStepColumns =
    "rank,epoch,step,global_step,loss,load_s,h2d_s,forward_s,backward_s,comm_total_s,comm_exposed_s,"
    "optimizer_s,wait_s,step_s,images,comm_bytes,optimizer_step,loss_scale,update_skipped";
}

void write_steps_csv(const std::string& path, const TrainReport& report) {
  write_file_atomic(path, [&](std::ostream& os) {
    os << kStepColumns << "\n";
    os.precision(9);
    for (const auto& r : report.steps) {
      os << r.rank << "," << r.epoch << "," << r.step << "," << r.global_step << "," << r.loss;
      for (int p = 0; p < kPhaseCount; ++p) os << "," << r.times.s[p];
      os << "," << r.images << "," << r.comm_bytes << "," << (r.optimizer_step ? 1 : 0) << ","
         << std::setprecision(17) << r.loss_scale << std::setprecision(9) << ","
         << (r.update_skipped ? 1 : 0) << "\n";
    }
  });
}

std::string summary_csv_header() {
  std::string h = "model,dataset,devices,parallel,algo,ranks,threads_per_rank,batch_size,rank_batch,"
                  "accumulate,bucket_mb,overlap,epochs,measured_steps,trainable_params";
  for (auto name : kPhaseNames) h += ",mean_" + std::string(name) + "_s";
  h += ",images_per_s,speedup,scaling_efficiency,load_balance,comm_efficiency,parallel_efficiency,"
       "bytes_per_epoch_formula,bytes_per_epoch_counted,final_loss,test_accuracy,threshold_step,"
       "threshold_epoch,wall_s,optimizer,grad_dtype,peak_host_allocated_bytes,peak_host_reserved_bytes,"
       "peak_device_allocated_bytes,peak_device_reserved_bytes,other_cpu_share";
  return h;
}

std::string summary_csv_row(const TrainReport& report, const Summary& s) {
  const TrainOptions& o = report.options;
  std::ostringstream os;
  os.precision(9);
  os << o.model << "," << o.dataset << "," << csv_field(o.devices) << "," << choice_name(kParallelModes, o.parallel) << ","
     << algorithm_name(o.algo) << "," << report.ranks << "," << report.threads_per_rank << "," << o.batch_size << ","
     << o.batch_size / report.ranks << "," << o.accumulate << "," << o.bucket_mb << "," << (o.overlap ? 1 : 0)
     << "," << o.epochs << "," << s.measured_steps << "," << report.num_trainable;
  for (double m : s.mean_s) os << "," << m;
  os << "," << s.images_per_s << "," << s.speedup << "," << s.scaling_efficiency << "," << s.load_balance << ","
     << s.comm_efficiency << "," << s.parallel_efficiency << "," << s.bytes_per_epoch_formula << ","
     << s.bytes_per_epoch_counted << "," << s.final_loss << "," << s.test_accuracy << ","
     << report.threshold_step << "," << report.threshold_epoch << "," << report.wall_s << "," << o.optimizer << ","
     << choice_name(kGradDtypes, o.grad_dtype) << "," << s.memory.host_allocated << "," << s.memory.host_reserved << ","
     << s.memory.device_allocated << "," << s.memory.device_reserved << ",";
  if (s.other_cpu_share >= 0) os << s.other_cpu_share;
  return os.str();
}

void write_summary_csv(const std::string& path, const TrainReport& report, const Summary& s) {
  write_file_atomic(path, summary_csv_header() + "\n" + summary_csv_row(report, s) + "\n");
}

void write_config_json(const std::string& path, const TrainReport& report) {
  const TrainOptions& o = report.options;
  nlohmann::json j;
  j["dpx_version"] = DPX_VERSION_STRING;
  j["model"] = o.model;
  j["head"] = o.head;
  j["freeze_backbone"] = o.freeze_backbone;
  j["weights"] = o.weights_file;
  j["dataset"] = o.dataset;
  j["data_dir"] = o.data_dir;
  j["image_size"] = o.image_size;
  j["epochs"] = o.epochs;
  j["batch_size"] = o.batch_size;
  j["optimizer"] = o.optimizer;
  j["lr"] = o.effective_lr();
  j["weight_decay"] = o.effective_weight_decay();
  // The settings of the other optimizer do not apply: null, not a value that was never used.
  const bool adamw = o.optimizer == "adamw";
  j["momentum"] = adamw ? nlohmann::json() : nlohmann::json(o.momentum);
  j["nesterov"] = adamw ? nlohmann::json() : nlohmann::json(o.nesterov);
  j["betas"] = adamw ? nlohmann::json::array({o.beta1, o.beta2}) : nlohmann::json();
  j["eps"] = adamw ? nlohmann::json(o.eps) : nlohmann::json();
  j["label_smoothing"] = o.label_smoothing;
  j["seed"] = o.seed;
  j["steps_limit"] = o.max_steps;
  j["devices"] = o.devices;
  j["parallel"] = std::string(choice_name(kParallelModes, o.parallel));
  j["algo"] = std::string(algorithm_name(o.algo));
  j["bucket_mb"] = o.bucket_mb;
  j["accumulate"] = o.accumulate;
  j["overlap"] = o.overlap;
  j["workers"] = o.workers;
  j["warmup_steps"] = o.warmup_steps;
  j["loss_threshold"] = o.loss_threshold;
  j["comm_timeout_s"] = o.comm_timeout_s;
  j["net_sim"] = o.net_sim;
  j["ranks_per_node"] = o.ranks_per_node;
  j["ranks"] = report.ranks;
  j["threads_per_rank"] = report.threads_per_rank;
  // The OpenMP wait policy the run had (--omp-wait sets it; "default": the OpenMP library's own).
  j["omp_wait_policy"] = omp_wait_policy();
  j["other_cpu_share"] = report.other_cpu_share >= 0 ? nlohmann::json(report.other_cpu_share) : nlohmann::json();
  j["conv_algo"] = o.conv_algo;
  j["precision"] = std::string(choice_name(kPrecisions, o.precision));
  j["tf32"] = o.allow_tf32;
  j["deterministic"] = o.deterministic;
  j["cudnn_algo"] = o.cudnn_algo;
  j["memory_format"] = std::string(choice_name(kMemoryFormats, o.memory_format));
  j["grad_dtype"] = std::string(choice_name(kGradDtypes, o.grad_dtype));
  // The loss scaling in force (auto resolved): null when none.
  const std::optional<LossScaleOptions> scaling = o.loss_scaling();
  j["loss_scale"] = !scaling          ? nlohmann::json()
                    : scaling->dynamic ? nlohmann::json("dynamic")
                                       : nlohmann::json(scaling->init_scale);
  j["initial_loss_scale"] = scaling && scaling->dynamic ? nlohmann::json(o.initial_loss_scale) : nlohmann::json();
  j["loss_scale_window"] = scaling && scaling->dynamic ? nlohmann::json(o.loss_scale_window) : nlohmann::json();
  // What each CPU convolution shape ran, and why (this process's; empty on GPUs).
  nlohmann::json convs = nlohmann::json::array();
  for (const cpu::ConvChoice& c : cpu::conv_choices())
    convs.push_back({{"shape", c.shape}, {"pass", c.pass}, {"algo", c.algo}, {"why", c.why},
                     {"threads", c.threads}, {"nested", c.nested}});
  j["conv_choices"] = convs;
  const LaunchInfo& l = report.launch;
  nlohmann::json launch = {{"backend", l.backend}};
  if (l.backend == "mpi") {
    nlohmann::json env = nlohmann::json::object();
    for (const auto& [name, value] : l.launcher_env) env[name] = value;
    launch["library"] = l.library;
    launch["thread_level"] = l.thread_level;
    launch["launcher"] = l.launcher;
    launch["launcher_env"] = env;  // rank 0's
    launch["processes"] = l.ranks;
    launch["nodes"] = l.nodes;
    launch["hosts"] = l.hosts;
    launch["pids"] = l.pids;
    launch["node_of_rank"] = l.node_of_rank;
    launch["local_rank"] = l.local_rank;
    launch["cores_per_rank"] = l.cores_per_rank;
    launch["bound_by_launcher"] = l.bound;
    // Each rank's steady clock minus rank 0's, estimated at start-up by ping-pong; every time in
    // steps.csv and the trace is on rank 0's clock, within the uncertainty.
    launch["clock_offset_s"] = l.clock_offset_s;
    launch["clock_uncertainty_s"] = l.clock_uncertainty_s;
  } else {
    launch["processes"] = 1;
  }
  j["launch"] = launch;
  j["hardware_threads"] = std::thread::hardware_concurrency();
  j["num_parameters"] = report.num_parameters;
  j["num_trainable"] = report.num_trainable;
  j["train_samples"] = report.train_samples;
  j["steps_per_epoch"] = report.steps_per_epoch;
  write_file_atomic(path, j.dump(2) + "\n");
}

// The trace's tracks of a rank after the phases' (one per phase): the bucket all-reduces, the
// ops (--profile-ops), then one per loader worker (the first for batches loaded without workers).
constexpr int kBucketTrack = kPhaseCount, kOpTrack = kPhaseCount + 1, kLoaderTrack = kPhaseCount + 2;

int track_of(const TraceSpan& s) {
  switch (s.kind) {
    case TraceSpan::Kind::bucket: return kBucketTrack;
    case TraceSpan::Kind::op: return kOpTrack;
    case TraceSpan::Kind::batch: return kLoaderTrack + 1 + s.index;
  }
  return kBucketTrack;
}

std::string track_name(int track) {
  if (track == kBucketTrack) return "all-reduce (buckets)";
  if (track == kOpTrack) return "ops";
  if (track == kLoaderTrack) return "loader (no workers)";
  return "loader worker " + std::to_string(track - kLoaderTrack - 1);
}

void write_trace(const std::string& path, const TrainReport& report, int64_t first, int64_t last) {
  nlohmann::json events = nlohmann::json::array();
  auto us = [&](double t) { return (t - report.start_s) * 1e6; };
  std::set<std::pair<int, int>> tracks;  // (rank, track) of the spans
  for (const TraceSpan& s : report.trace_spans)
    if (s.global_step >= first && s.global_step <= last) tracks.insert({s.rank, track_of(s)});
  for (int r = 0; r < report.ranks; ++r) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}});
    for (int p = 0; p < kPhaseCount; ++p)
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", r}, {"tid", p},
                        {"args", {{"name", std::string(kPhaseNames[p])}}}});
  }
  for (const auto& [rank, track] : tracks)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", track},
                      {"args", {{"name", track_name(track)}}}});
  const std::string algo(algorithm_name(report.options.algo));
  for (const TraceSpan& s : report.trace_spans) {
    if (s.global_step < first || s.global_step > last) continue;
    nlohmann::json e = {{"ph", "X"}, {"pid", s.rank}, {"tid", track_of(s)}, {"ts", us(s.start_s)},
                        {"dur", s.seconds * 1e6}};
    switch (s.kind) {
      case TraceSpan::Kind::bucket:  // where it ran, on the rank's communication thread
        e["name"] = "bucket " + std::to_string(s.index);
        e["args"] = {{"step", s.global_step}, {"bucket", s.index}, {"gradients", s.count}, {"bytes_sent", s.bytes},
                     {"algorithm", algo}};
        break;
      case TraceSpan::Kind::batch:  // loaded ahead by a worker, or inside the load phase without one
        e["name"] = "batch for step " + std::to_string(s.global_step);
        e["args"] = {{"step", s.global_step}, {"images", s.count}, {"worker", s.index}};
        break;
      case TraceSpan::Kind::op:
        e["name"] = ops::profile::op_name(s.index);
        e["args"] = {{"step", s.global_step}};
        break;
    }
    events.push_back(std::move(e));
  }
  const Phase order[] = {Phase::load, Phase::forward, Phase::backward, Phase::comm_exposed, Phase::optimizer};
  for (const auto& rec : report.steps) {
    if (rec.global_step < first || rec.global_step > last) continue;
    double t = rec.start_s;
    nlohmann::json args = {{"epoch", rec.epoch}, {"step", rec.step}, {"loss", rec.loss}};
    events.push_back({{"ph", "X"}, {"name", "step " + std::to_string(rec.global_step)}, {"pid", rec.rank},
                      {"tid", static_cast<int>(Phase::step)}, {"ts", us(t)},
                      {"dur", rec.times[Phase::step] * 1e6}, {"args", args}});
    for (Phase p : order) {
      double d = rec.times[p];
      if (d <= 0) continue;
      events.push_back({{"ph", "X"}, {"name", std::string(phase_name(p))}, {"pid", rec.rank},
                        {"tid", static_cast<int>(p)}, {"ts", us(t)}, {"dur", d * 1e6}});
      if (p == Phase::comm_exposed && rec.times[Phase::comm_total] > 0) {
        double c = rec.times[Phase::comm_total];  // drawn ending where the exposed part ends
        events.push_back({{"ph", "X"}, {"name", "comm_total"}, {"pid", rec.rank},
                          {"tid", static_cast<int>(Phase::comm_total)}, {"ts", us(t + d - c)}, {"dur", c * 1e6}});
      }
      t += d;
    }
  }
  // otherData (a member the trace viewers keep and show) marks the file as dpx's
  // (core/output_files.hpp); nlohmann sorts the members, so it comes before the events.
  nlohmann::json doc = {{"traceEvents", events},
                        {"displayTimeUnit", "ms"},
                        {"otherData", {{std::string(kGeneratorKey), std::string(kGeneratorValue)}}}};
  write_file_atomic(path, doc.dump() + "\n", "--trace");
}

}  // namespace dpx::parallel
