// `dpx predict`: step time, exposed communication, throughput, speedup and scaling efficiency of
// DDP at 1 ... 1024 ranks (analysis/predict.hpp), from the computation measured here (one replica,
// parallel/bench/compute_profile.hpp) and a network: a `dpx fit` file or a link's rate and latency.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "analysis/csv_table.hpp"
#include "analysis/fit.hpp"
#include "analysis/predict.hpp"
#include "core/atomic_file.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"
#include "parallel/bench/compute_profile.hpp"
#include "parallel/comm/net_sim.hpp"
#include "parallel/comm/transport.hpp"
#include "tools/commands.hpp"
#include "tools/train_flags.hpp"
#include "zoo/registry.hpp"

namespace dpx::tools {

namespace {

struct PredictFlags {
  std::string model;
  std::vector<int64_t> batch_sizes = {32};
  std::string ranks = "1..1024";
  std::string scaling = "weak";
  std::string parallel = "ddp";
  std::string algo = "ring";
  std::string fit, link, intra_link, backend;
  int ranks_per_node = 0;
  double bucket_mb = 25;
  bool no_overlap = false;
  int image_size = 0, threads = 1, steps = 4, warmup = 1, num_classes = 10;
  int64_t max_measured_batch = 32;
  double compute_scale = 1, min_efficiency = 0.8;
  std::vector<std::string> compare;
  std::string csv;
  bool force = false;  // --force: replace a --csv that dpx did not write
};

// The seconds per byte of this machine's reduction (a sum of two f32 buffers into a third, as
// the schedules' receive-and-reduce steps do): gamma when no fit gives it.
double measure_gamma() {
  const size_t n = size_t{4} << 20;  // 16 MiB per buffer: beyond the caches, as gradients are
  std::vector<float> a(n, 1.f), b(n, 2.f), c(n, 0.f);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const double start = now_s();
    parallel::reduce_into(c.data(), a.data(), b.data(), n, DType::f32, parallel::ReduceOp::sum);
    best = std::min(best, now_s() - start);
  }
  return best / static_cast<double>(n * sizeof(float));
}

// The fit of `collective` for `algo`: in place first (DDP reduces its buckets in place), then out
// of place; on --backend when given, else the one with the most points.
const analysis::CollectiveFit* pick(const analysis::FitResult& fits, const std::string& collective,
                                    const std::string& algo, const std::string& backend) {
  const analysis::CollectiveFit* best = nullptr;
  for (const auto& f : fits.collectives) {
    if (!f.ok || f.ranks != 0 || f.collective != collective || (!algo.empty() && f.algo != algo)) continue;
    if (!backend.empty() && f.backend != backend) continue;
    if (!best || (f.in_place && !best->in_place) || (f.in_place == best->in_place && f.points > best->points)) best = &f;
  }
  return best;
}

using analysis::rate_text;
using analysis::time_text;

analysis::Network make_network(const PredictFlags& f, std::ostream& os) {
  analysis::Network net;
  net.algo = f.algo;
  net.ranks_per_node = std::max(1, f.ranks_per_node);
  std::optional<analysis::FitResult> fits;
  if (!f.fit.empty()) fits = analysis::read_fit_json(f.fit, "--fit");
  bool have_gamma = false;
  std::string gamma_source;
  bool memory_only = false;  // the network's fit measured copies inside one machine
  if (fits) {
    const analysis::CollectiveFit* ar = pick(*fits, "all_reduce", f.algo == "hier" ? "ring" : f.algo, f.backend);
    const analysis::CollectiveFit* link = pick(*fits, "sendrecv", "", f.backend);
    if (ar) {
      memory_only = ar->memory_only;
      net.alpha_s = ar->alpha_s;
      net.beta_s_per_byte = ar->beta_s_per_byte;
      net.source = "--fit " + f.fit + ": " + ar->name();
      net.fit_bytes_min = ar->bytes_min;
      net.fit_bytes_max = ar->bytes_max;
      if (ar->has_gamma) {
        net.gamma_s_per_byte = ar->gamma_s_per_byte;
        have_gamma = true;
        gamma_source = ar->name();
      } else if (f.link.empty()) {
        have_gamma = true;  // folded into beta (the fit says so); measured below when --link replaces beta
        gamma_source = "folded into beta by the fit";
      }
    } else if (link) {
      memory_only = link->memory_only;
      net.alpha_s = link->alpha_s;
      net.beta_s_per_byte = link->beta_s_per_byte;
      net.source = "--fit " + f.fit + ": " + link->name();
      net.fit_bytes_min = link->bytes_min;
      net.fit_bytes_max = link->bytes_max;
      if (const analysis::CollectiveFit* g = pick(*fits, "all_reduce", "", f.backend); g && g->has_gamma) {
        net.gamma_s_per_byte = g->gamma_s_per_byte;
        have_gamma = true;
        gamma_source = g->name();
      }
    } else if (f.link.empty()) {
      std::string has;
      for (const auto& c : fits->collectives)
        if (c.ok) has += (has.empty() ? "" : ", ") + c.name();
      usage_fail("--fit ", f.fit, ": no fitted all_reduce ", f.algo, " and no sendrecv", f.backend.empty() ? "" : " on --backend " + f.backend,
                 " to take the network from (it has: ", has.empty() ? "no usable fit" : has,
                 "); measure them with dpx collective -t all_reduce --algo ", f.algo, " or -t sendrecv, or give --link");
    }
  }
  if (!f.link.empty()) {
    const parallel::NetSim link = parallel::parse_net_sim(f.link, "--link");
    if (!link.enabled()) usage_fail("--link: give RATE,LATENCY (e.g. 25gbit,2us)");
    net.alpha_s = link.latency_s;
    net.beta_s_per_byte = 1 / link.bytes_per_s;
    net.source = "--link " + link.str();
    net.fit_bytes_min = net.fit_bytes_max = 0;
    memory_only = false;
  }
  if (!have_gamma) {
    net.gamma_s_per_byte = measure_gamma();
    gamma_source = "measured here (one core summing f32 buffers)";
  }
  net.intra_alpha_s = net.alpha_s;
  net.intra_beta_s_per_byte = net.beta_s_per_byte;
  std::string intra_source = "the same network";
  if (!f.intra_link.empty()) {
    const parallel::NetSim in = parallel::parse_net_sim(f.intra_link, "--intra-link");
    net.intra_alpha_s = in.latency_s;
    net.intra_beta_s_per_byte = in.enabled() ? 1 / in.bytes_per_s : 0;
    intra_source = "--intra-link " + in.str();
  } else if (fits && !f.link.empty()) {
    const analysis::CollectiveFit* local = pick(*fits, "all_reduce", "tree", f.backend);
    if (!local) local = pick(*fits, "sendrecv", "", f.backend);
    if (!local) local = pick(*fits, "all_reduce", "", f.backend);
    if (local) {
      net.intra_alpha_s = local->alpha_s;
      net.intra_beta_s_per_byte = local->beta_s_per_byte;
      intra_source = "--fit: " + local->name();
    }
  }
  os << "# network: alpha " << time_text(net.alpha_s) << ", 1/beta " << rate_text(net.beta_s_per_byte) << ", 1/gamma "
     << (net.gamma_s_per_byte > 0 ? rate_text(net.gamma_s_per_byte) : "-") << " (" << net.source << ")\n"
     << "#   gamma: " << gamma_source << "\n";
  // A fit of runs whose bound was one rank's memcpy (thread ranks without --net-sim) measured
  // memory copies: it says nothing about ranks on other nodes (an efficiency of 0.999 at 512
  // ranks, seen).
  if (memory_only)
    os << "# warning: the network is " << net.source << ": copies inside one machine at "
       << rate_text(net.beta_s_per_byte) << ", no network between nodes. Predictions for ranks on other nodes need "
       << "a fit of runs across them (mpirun ... dpx collective), of a simulated network (dpx collective --net-sim "
          "RATE,LATENCY), or --link RATE,LATENCY\n";
  if (f.algo == "hier")
    os << "#   hier: " << net.ranks_per_node << " ranks per node; inside a node alpha " << time_text(net.intra_alpha_s)
       << ", 1/beta " << rate_text(net.intra_beta_s_per_byte) << " (" << intra_source << ")\n";
  return net;
}

struct Measured {
  double step_s = 0, exposed_s = 0, images_per_s = 0;
};

// --compare: dpx bench results.csv rows of this model, DDP and algorithm, by (batch, ranks).
std::map<std::pair<int64_t, int>, Measured> read_measured(const PredictFlags& f) {
  std::map<std::pair<int64_t, int>, Measured> out;
  for (const std::string& path : f.compare) {
    const analysis::CsvTable t = analysis::CsvTable::read(path, "--compare");
    if (!t.has("trainable_params") || !t.has("mean_step_s"))
      usage_fail("--compare: '", path, "' is not a dpx bench results.csv");
    const size_t model = t.column("model"), par = t.column("parallel"), algo = t.column("algo"), ranks = t.column("ranks"),
                 batch = t.column("batch_size"), rank_batch = t.column("rank_batch"), step = t.column("mean_step_s"),
                 exposed = t.column("mean_comm_exposed_s"), ips = t.column("images_per_s");
    for (size_t r = 0; r < t.rows(); ++r) {
      if (t.text(r, model) != f.model || t.text(r, algo) != f.algo) continue;
      const int k = static_cast<int>(t.number(r, ranks));
      if (k > 1 && t.text(r, par) != "ddp") continue;
      const int64_t b = static_cast<int64_t>(f.scaling == "weak" ? t.number(r, rank_batch) : t.number(r, batch));
      const Measured m{t.number(r, step), t.number(r, exposed), t.number(r, ips)};
      // A measured step takes time: zero or negative figures are an edited file, not a run.
      if (!(m.step_s > 0) || m.exposed_s < 0 || !(m.images_per_s > 0))
        usage_fail("--compare: '", path, "' line ", t.line_of(r), ": mean_step_s ", m.step_s, ", mean_comm_exposed_s ",
                   m.exposed_s, " and images_per_s ", m.images_per_s, " are not a measured step's (positive times)");
      out[{b, k}] = m;
    }
  }
  return out;
}

void run(const PredictFlags& f) {
  // ---- flags, before anything is measured ----
  if (f.model.empty()) usage_fail("--model: name the model to predict (dpx models --list)");
  const zoo::ModelInfo& info = zoo::find_model(f.model);
  if (f.image_size != 0 && f.image_size < info.min_image_size)
    usage_fail("--image-size ", f.image_size, ": ", f.model, " needs ", info.min_image_size, " or more (", info.note, ")");
  if (f.image_size < 0) usage_fail("--image-size: ", f.image_size, " is not a size (0: the model's own)");
  if (f.threads < 1) usage_fail("--threads: ", f.threads, " is not a number of threads");
  if (f.parallel == "dp")
    usage_fail("--parallel dp: DataParallel runs its replicas in one process on one machine, so it has no network to "
               "predict; predict --parallel ddp");
  if (f.parallel != "ddp") usage_fail("--parallel: '", f.parallel, "': dpx predict models ddp");
  if (f.scaling != "weak" && f.scaling != "strong") usage_fail("--scaling: use weak or strong, not '", f.scaling, "'");
  for (int64_t b : f.batch_sizes)
    if (b < 1) usage_fail("--batch-sizes: ", b, " is not a batch size");
  const std::vector<int> ranks = analysis::parse_rank_list(f.ranks, "--ranks");
  if (f.fit.empty() && f.link.empty())
    usage_fail("dpx predict needs a network: --fit FILE (from dpx fit) and/or --link RATE,LATENCY (e.g. 25gbit,2us)");
  if (f.algo == "hier" && f.ranks_per_node < 1)
    usage_fail("--algo hier: give --ranks-per-node G (ranks on one node; the tree inside, the ring across nodes)");
  if (f.algo != "ring" && f.algo != "tree" && f.algo != "naive" && f.algo != "rhd" && f.algo != "hier")
    usage_fail("--algo ", f.algo, ": dpx predicts its own all-reduce algorithms: ring, tree, naive, rhd, hier");
  if (!(f.compute_scale > 0) || !std::isfinite(f.compute_scale) || f.compute_scale > 1e6)
    usage_fail("--compute-scale: ", f.compute_scale, " is not a factor in (0, 1e6] (a device 10 times faster: 10)");
  if (!f.backend.empty() && f.backend != "threads" && f.backend != "mpi" && f.backend != "nccl" && f.backend != "p2p")
    usage_fail("--backend '", f.backend, "': use threads, mpi, nccl or p2p (the backend whose fits --fit holds), "
               "or leave it out for any");
  for (size_t i = 0; i < f.batch_sizes.size(); ++i)
    for (size_t j = i + 1; j < f.batch_sizes.size(); ++j)
      if (f.batch_sizes[i] == f.batch_sizes[j])
        usage_fail("--batch-sizes: ", f.batch_sizes[i], " is given twice: list each batch size once");
  if (!(f.min_efficiency > 0 && f.min_efficiency <= 1)) usage_fail("--min-efficiency: give a fraction in (0, 1]");
  if (f.warmup < 0) usage_fail("--warmup must be >= 0 (got ", f.warmup, ")");
  if (f.steps <= f.warmup)
    usage_fail("--steps ", f.steps, " with --warmup ", f.warmup, ": no step would be measured; --steps counts the "
               "warm-up steps too (as in dpx train and dpx bench): pass more --steps");
  if (f.max_measured_batch < 1) usage_fail("--max-measured-batch: ", f.max_measured_batch, " is not a batch size");
  if (!(f.bucket_mb >= 0)) usage_fail("--bucket-mb: ", f.bucket_mb, " is not a size in MiB");
  // An unwritable, foreign or input-naming --csv fails now, not after minutes, and the file is left
  // as it is: it is replaced only at the end, whole, by a run that got there.
  if (!f.csv.empty()) {
    std::vector<FlagPath> inputs = {{"--fit", f.fit}};
    for (const std::string& c : f.compare) inputs.push_back({"--compare", c});
    check_outputs_distinct({{"--csv", f.csv}}, inputs);
    check_output_file(f.csv, FileKind::predict_csv, "--csv", f.force);
    check_writable_parent(f.csv, "--csv");
  }
  const auto measured = read_measured(f);

  std::cout << "# dpx predict: " << f.model << ", DDP " << f.algo << ", " << f.scaling << " scaling, bucket "
            << f.bucket_mb << " MiB" << (f.no_overlap ? ", no overlap" : "") << "\n";
  const analysis::Network net = make_network(f, std::cout);

  // ---- the computation of one replica, measured at one or two per-rank batches ----
  std::set<int64_t> needed;
  for (int64_t b : f.batch_sizes)
    for (int k : ranks)
      if (f.scaling == "weak") needed.insert(b);
      else if (b % k == 0) needed.insert(b / k);
  for (int64_t b : f.batch_sizes) needed.insert(b);  // the one-rank baselines
  const int64_t hi = std::min(*needed.rbegin(), f.max_measured_batch);
  int64_t lo = std::min(hi, std::max<int64_t>(*needed.begin(), std::max<int64_t>(1, hi / 4)));
  // A line needs two points: for several batches, and for one beyond --max-measured-batch (with one
  // point, batch 64 was taken as costly as batch 32: resnet18 at 64x64 predicted 441 ms, measured 829).
  if (lo == hi && (needed.size() > 1 || *needed.rbegin() > hi)) lo = std::max<int64_t>(1, hi / 4);
  parallel::TrainOptions base;
  base.model = f.model;
  base.image_size = f.image_size > 0 ? f.image_size : zoo::find_model(f.model).default_image_size;
  base.channels = 3;
  base.num_classes = f.num_classes;
  base.threads = f.threads;
  base.bucket_mb = f.bucket_mb;
  std::cout << "# computation of one replica (" << base.image_size << "x" << base.image_size << ", " << f.threads
            << " thread" << (f.threads == 1 ? "" : "s") << "), measured here:" << std::flush;
  analysis::ComputeModel compute;
  char line[400];
  auto phases_of = [](const parallel::StepProfile& p) {
    analysis::Phases ph;
    ph.load = p.mean_s[static_cast<int>(Phase::load)] + p.mean_s[static_cast<int>(Phase::h2d)];
    ph.forward = p.mean_s[static_cast<int>(Phase::forward)];
    ph.backward = p.mean_s[static_cast<int>(Phase::backward)];
    ph.optimizer = p.mean_s[static_cast<int>(Phase::optimizer)];
    return ph;
  };
  for (int64_t b : {lo, hi}) {
    if (b == lo && b == hi && compute.batch_hi > 0) break;
    const parallel::StepProfile p = parallel::measure_step(base, b, f.steps, f.warmup);
    const analysis::Phases ph = phases_of(p);
    std::snprintf(line, sizeof line, " batch %lld: %.1f ms (forward %.1f, backward %.1f);", static_cast<long long>(b),
                  ph.total() * 1e3, ph.forward * 1e3, ph.backward * 1e3);
    std::cout << line << std::flush;
    if (b == lo) compute.batch_lo = static_cast<double>(b), compute.lo = ph;
    if (b == hi) compute.batch_hi = static_cast<double>(b), compute.hi = ph;
  }
  std::cout << "\n#   other batches on the straight line through " << (lo == hi ? "that point (constant)" : "these two")
            << (*needed.rbegin() > hi ? " (extrapolated beyond --max-measured-batch)" : "") << "\n";
  if (lo != hi && compute.lo.total() > compute.hi.total()) {
    std::snprintf(line, sizeof line, "%.1f ms against %.1f ms", compute.lo.total() * 1e3, compute.hi.total() * 1e3);
    std::cout << "# warning: batch " << lo << " measured slower than batch " << hi << " (" << line
              << "): the machine was busy; a phase that fell is taken as flat beyond batch " << hi << ". Rerun on an idle machine or with more "
                 "--steps\n";
  }
  if (f.compute_scale != 1) std::cout << "#   --compute-scale " << f.compute_scale << ": computation taken that many times faster\n";
  const std::vector<parallel::BucketReady> ready = parallel::measure_bucket_readiness(base, lo);
  std::vector<analysis::BucketPlan> buckets;
  double grad_bytes = 0;
  for (const auto& r : ready) {
    buckets.push_back({static_cast<double>(r.bytes), r.ready_fraction});
    grad_bytes += static_cast<double>(r.bytes);
  }
  std::snprintf(line, sizeof line, "%.2f", grad_bytes / (1 << 20));
  std::cout << "# gradients: " << line << " MiB in " << buckets.size() << " bucket"
            << (buckets.size() == 1 ? "" : "s") << " (ready at";
  for (size_t i = 0; i < std::min<size_t>(buckets.size(), 8); ++i)
    std::cout << " " << static_cast<int>(std::lround(buckets[i].ready_fraction * 100)) << "%";
  std::cout << (buckets.size() > 8 ? " ..." : "") << " of backward)\n";
  if (net.fit_bytes_max > 0 && !buckets.empty()) {
    double smallest = buckets.front().bytes, largest = smallest;
    for (const auto& b : buckets) smallest = std::min(smallest, b.bytes), largest = std::max(largest, b.bytes);
    size_t inside = 0;
    for (const auto& b : buckets) inside += b.bytes >= net.fit_bytes_min && b.bytes <= net.fit_bytes_max;
    if (inside == 0) {
      std::snprintf(line, sizeof line,
                    "# warning: none of the %zu buckets (%.3g..%.3g MiB) lies in the sizes the fit holds for "
                    "(%.3g..%.3g MiB): every all-reduce is extrapolated; measure the fit over sizes that hold them "
                    "(dpx collective -b .. -e ..)\n",
                    buckets.size(), smallest / (1 << 20), largest / (1 << 20), net.fit_bytes_min / (1 << 20),
                    net.fit_bytes_max / (1 << 20));
      std::cout << line;
    } else if (smallest < net.fit_bytes_min || largest > net.fit_bytes_max) {
      std::snprintf(line, sizeof line,
                    "# note: buckets of %.3g..%.3g MiB lie outside the sizes the fit holds for (%.3g..%.3g MiB): "
                    "extrapolated\n", smallest / (1 << 20), largest / (1 << 20), net.fit_bytes_min / (1 << 20),
                    net.fit_bytes_max / (1 << 20));
      std::cout << line;
    }
  }

  analysis::PredictOptions po;
  po.scaling = f.scaling;
  po.overlap = !f.no_overlap;
  po.compute_scale = f.compute_scale;
  const auto rows = analysis::predict(compute, buckets, net, po, f.batch_sizes, ranks);

  // ---- the table, the best k, the CSV ----
  std::snprintf(line, sizeof line, "\n%7s %6s %8s | %10s %10s %10s %10s | %10s %8s %6s%s\n", "batch", "ranks", "per rank",
                "compute", "comm", "exposed", "step", "img/s", "speedup", "eff", measured.empty() ? "" : " | measured step   error");
  std::cout << line;
  std::ostringstream csv;
  csv << "model,algo,scaling,batch,ranks,rank_batch,compute_s,comm_s,exposed_s,step_s,images_per_s,speedup,efficiency,"
         "measured_step_s,error\n";
  for (const auto& p : rows) {
    if (!p.possible) {
      std::snprintf(line, sizeof line, "%7lld %6d %8s   (%s)\n", static_cast<long long>(p.batch), p.ranks, "-", p.why.c_str());
      std::cout << line;
      continue;
    }
    std::snprintf(line, sizeof line, "%7lld %6d %8g | %8.2f ms %8.2f ms %8.2f ms %8.2f ms | %10.1f %8.2f %6.3f",
                  static_cast<long long>(p.batch), p.ranks, p.rank_batch, p.compute.total() * 1e3, p.comm_s * 1e3,
                  p.exposed_s * 1e3, p.step_s * 1e3, p.images_per_s, p.speedup, p.efficiency);
    std::cout << line;
    std::string m_step, m_err;
    if (auto it = measured.find({p.batch, p.ranks}); it != measured.end()) {
      const double err = (p.step_s - it->second.step_s) / it->second.step_s;
      std::snprintf(line, sizeof line, " | %8.2f ms %+6.1f%%", it->second.step_s * 1e3, err * 100);
      std::cout << line;
      m_step = std::to_string(it->second.step_s);
      m_err = std::to_string(err);
    }
    std::cout << "\n";
    csv << f.model << "," << f.algo << "," << f.scaling << "," << p.batch << "," << p.ranks << "," << p.rank_batch << ","
        << p.compute.total() << "," << p.comm_s << "," << p.exposed_s << "," << p.step_s << "," << p.images_per_s << ","
        << p.speedup << "," << p.efficiency << "," << m_step << "," << m_err << "\n";
  }
  std::cout << "\n";
  for (int64_t b : f.batch_sizes) {
    const analysis::Prediction* fastest = nullptr;
    const analysis::Prediction* efficient = nullptr;
    for (const auto& p : rows) {
      if (p.batch != b || !p.possible) continue;
      if (!fastest || p.images_per_s > fastest->images_per_s) fastest = &p;
      if (p.efficiency >= f.min_efficiency && (!efficient || p.ranks > efficient->ranks)) efficient = &p;
    }
    if (!fastest) continue;
    std::snprintf(line, sizeof line, "best for batch %lld: %d rank%s for the most images/s (%.1f, efficiency %.3f)",
                  static_cast<long long>(b), fastest->ranks, fastest->ranks == 1 ? "" : "s", fastest->images_per_s, fastest->efficiency);
    std::cout << line;
    if (efficient)
      std::snprintf(line, sizeof line, "; at most %d rank%s keep%s efficiency >= %.2f\n", efficient->ranks,
                    efficient->ranks == 1 ? "" : "s", efficient->ranks == 1 ? "s" : "", f.min_efficiency);
    else
      std::snprintf(line, sizeof line, "; no rank count keeps efficiency >= %.2f\n", f.min_efficiency);
    std::cout << line;
  }
  if (!f.csv.empty()) {
    write_file_atomic(f.csv, csv.str(), "--csv");
    std::cout << "# wrote " << f.csv << "\n";
  }
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "predict", "predict DDP's step time, exposed communication, throughput and scaling efficiency at 1..1024 ranks "
                 "from the computation measured here and a network (dpx fit's JSON, or --link RATE,LATENCY)");
  auto f = std::make_shared<PredictFlags>();
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--model", f->model, "the model (dpx models --list)");
  cmd->add_option("--batch-size,--batch-sizes", f->batch_sizes,
                  "batch sizes, a comma list: per rank with --scaling weak, global with strong")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  cmd->add_option("--ranks", f->ranks, "rank counts: LOW..HIGH (the powers of two between, and the ends) or a comma list")
      ->capture_default_str();
  cmd->add_option("--scaling", f->scaling, "weak (each rank keeps the batch; as dpx bench) or strong (the batch is split)")
      ->capture_default_str();
  cmd->add_option("--parallel", f->parallel, "ddp (the only mode with a network)")->capture_default_str();
  cmd->add_option("--algo", f->algo, "DDP's all-reduce: ring, tree, naive, rhd or hier")->capture_default_str();
  cmd->add_option("--fit", f->fit, "a dpx fit JSON: alpha, beta (and gamma) of the algorithm's all_reduce, or of sendrecv");
  cmd->add_option("--link", f->link,
                  "RATE,LATENCY of the network between ranks (e.g. 25gbit,2us or 10GB,5us); with --fit, gamma and hier's "
                  "links inside a node still come from the fit");
  cmd->add_option("--backend", f->backend, "take the fits of this backend from --fit (threads, mpi; default: any)");
  cmd->add_option("--ranks-per-node", f->ranks_per_node, "hier: ranks on one node")->capture_default_str();
  cmd->add_option("--intra-link", f->intra_link, "hier: RATE,LATENCY of the links inside a node");
  cmd->add_option("--bucket-mb", f->bucket_mb, "DDP's bucket size in MiB, as dpx train")->capture_default_str();
  cmd->add_flag("--no-overlap", f->no_overlap, "all-reduce every bucket after backward instead of during it");
  cmd->add_option("--image-size", f->image_size, "input size (0: the model's own, e.g. 224)")->capture_default_str();
  cmd->add_option("--threads", f->threads, "CPU threads of the one replica measured (a rank's cores)")->capture_default_str();
  cmd->add_option("--steps", f->steps,
                  "steps per measured batch, the --warmup ones included (as in dpx train and dpx bench)")
      ->capture_default_str();
  cmd->add_option("--warmup", f->warmup, "of --steps, those left out of the means")->capture_default_str();
  cmd->add_option("--max-measured-batch", f->max_measured_batch,
                  "measure at most this per-rank batch; larger ones on the line through the measured two")
      ->capture_default_str();
  cmd->add_option("--num-classes", f->num_classes, "classes of the classifier")->capture_default_str();
  cmd->add_option("--compute-scale", f->compute_scale,
                  "take the computation this many times faster than measured here (a faster device)")
      ->capture_default_str();
  cmd->add_option("--min-efficiency", f->min_efficiency, "the efficiency the 'best' line keeps")->capture_default_str();
  cmd->add_option("--compare", f->compare, "dpx bench results.csv files: measured step times beside the predictions")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--csv", f->csv, "also write the predictions to this CSV file")->check(output_path());
  cmd->add_flag("--force", f->force,
                "replace a --csv file that exists and was not written by dpx predict (or is a link: the link is "
                "replaced, its target left alone)");
  cmd->callback([f] { run(*f); });
}

}  // namespace dpx::tools
