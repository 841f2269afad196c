// `dpx bench`: the measurement studies' sweep (docs/ARCHITECTURE.md, Studies) — every model ×
// batch size × parallel mode × scaling × algorithm × bucket size × accumulation × optimizer ×
// gradient dtype × device count, a fixed number of timed steps each, the whole sweep --repeat
// times — written to results.csv (one row per configuration: medians over the runs, their
// confidence intervals and spread, speedup and scaling efficiency against the configuration with
// the fewest ranks), runs.csv (one row per run) and one per-step CSV per run; with --profile-ops,
// the time of every op per run (ops.csv, kernels/op_profile.hpp).
#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"
#include "core/stop.hpp"
#include "kernels/op_profile.hpp"
#include "parallel/train/job.hpp"
#include "parallel/bench/metrics.hpp"
#include "parallel/bench/report_io.hpp"
#include "parallel/train/trainer.hpp"
#include "tools/bench_append.hpp"
#include "tools/bench_out.hpp"
#include "tools/bench_results.hpp"
#include "tools/commands.hpp"
#include "tools/max_batch.hpp"
#include "tools/op_table.hpp"
#include "tools/print.hpp"
#include "tools/train_flags.hpp"

namespace dpx::tools {

namespace {

struct BenchFlags {
  std::vector<std::string> models = {"lenet5"};
  std::vector<std::string> batch_sizes = {"64"};  // numbers, or max (the largest that fits, tools/max_batch.hpp)
  std::string memory_budget;                       // --batch-sizes max's budget; empty: what is free
  std::vector<std::string> devices = {"cpu:1", "cpu:2"};
  std::vector<std::string> parallel = {"ddp"};
  std::vector<std::string> scaling = {"weak"};
  std::vector<std::string> algo = {"ring"};
  std::vector<double> bucket_mb = {parallel::TrainOptions{}.bucket_mb};
  std::vector<int> accumulate = {parallel::TrainOptions{}.accumulate};
  std::vector<std::string> optimizer = {parallel::TrainOptions{}.optimizer};
  std::vector<std::string> grad_dtype = {"fp32"};
  std::vector<int> workers = {parallel::TrainOptions{}.workers};
  int repeat = 1;
  double noisy_spread = 0.10;
  std::string out_dir = "bench-out";
  bool profile_ops = false;  // time every op of the measured steps: a table per run and ops.csv
  bool profile_shapes = false;  // --profile-shapes: --profile-ops counted per call shape
  bool append = false;       // --append: more repeats of the same sweep into its folder (bench_append.hpp)
};

// "25" and "0.5", not "25.000000": values as they go into tags and the start report.
template <class T>
std::string text_of(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A value given twice would run the same configuration twice under one tag, its runs.csv rows
// and steps files overwriting each other: refused, naming the flag.
template <class T>
void check_distinct(const std::vector<T>& values, const char* flag) {
  for (size_t i = 0; i < values.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (values[i] == values[j])
        usage_fail(flag, ": ", text_of(values[i]), " is given twice; pass each value once (--repeat N runs each "
                   "configuration N times)");
}

template <class T>
std::string join_values(const std::vector<T>& vs) {
  std::string out;
  for (const auto& v : vs) out += (out.empty() ? "" : ",") + text_of(v);
  return out;
}

std::vector<std::string> expand_devices(const std::vector<std::string>& specs) {
  // "cpu:1,2,4" arrives from CLI11 as {"cpu:1", "2", "4"}: bare numbers repeat the last kind.
  std::vector<std::string> out;
  std::string kind = "cpu";
  for (const auto& s : specs) {
    if (s.empty()) usage_fail("--devices: empty entry");
    if (std::isdigit(static_cast<unsigned char>(s[0]))) {
      out.push_back(kind + ":" + s);
    } else {
      kind = s.substr(0, s.find(':'));
      out.push_back(s);
    }
  }
  return out;
}

// Under MPI without --devices: 1, 2, 4, ... ranks and the whole world.
std::vector<std::string> world_device_sets(int world) {
  std::vector<std::string> sets;
  for (int k = 1; k < world; k *= 2) sets.push_back("cpu:" + std::to_string(k));
  sets.push_back("cpu:" + std::to_string(world));
  return sets;
}

void run_bench(parallel::TrainOptions base, const TrainFlags& tf, const BenchFlags& bf, bool devices_given,
               parallel::ProcessGroup& processes) {
  const bool mpi = processes.launched(), rank0 = processes.rank() == 0;
  if (bf.models.empty() || bf.batch_sizes.empty() || bf.devices.empty() || bf.parallel.empty() ||
      bf.scaling.empty() || bf.algo.empty() || bf.bucket_mb.empty() || bf.accumulate.empty() || bf.optimizer.empty() ||
      bf.grad_dtype.empty() || bf.workers.empty())
    usage_fail("--models, --batch-sizes, --devices, --parallel, --scaling, --algo, --bucket-mb, --accumulate, "
               "--optimizer, --grad-dtype and --workers each need at least one value");
  for (const auto& sc : bf.scaling)
    if (sc != "weak" && sc != "strong")
      usage_fail("--scaling: use weak (fixed per-rank batch) or strong (fixed global batch), not '", sc, "'");
  if (bf.repeat < 1) usage_fail("--repeat: ", bf.repeat, " runs; pass 1 or more (3 or more for confidence intervals)");
  refuse_profile_ops_with_cuda_graph(bf.profile_ops, base.cuda_graph);
  if (!(bf.noisy_spread >= 0))
    usage_fail("--noisy-spread: ", bf.noisy_spread, " is not a spread; pass a fraction >= 0, e.g. 0.10 for 10 %");
  // Each optimizer and gradient dtype with the flags given: the other optimizer's flags are refused
  // (--momentum with adamw), and the loss scaling's follow the dtype (auto is dynamic for fp16).
  std::map<std::pair<std::string, std::string>, parallel::TrainOptions> per_choice;
  for (const auto& opt : bf.optimizer)
    for (const auto& gd : bf.grad_dtype) {
      parallel::TrainOptions o = base;
      o.optimizer = opt;
      TrainFlags each = tf;
      each.grad_dtype = gd;
      if (opt != "sgd" && opt != "adamw") usage_fail("--optimizer: unknown optimizer '", opt, "': use sgd or adamw");
      apply_train_flags(o, each);
      per_choice[{opt, gd}] = o;
    }
  std::vector<std::string> devices = mpi && !devices_given ? world_device_sets(processes.size())
                                                            : expand_devices(bf.devices);
  check_distinct(bf.models, "--models");
  check_distinct(bf.batch_sizes, "--batch-sizes");
  // Each batch: a number, or max (searched for each configuration under --memory-budget).
  std::vector<int64_t> batch_values;
  for (const std::string& text : bf.batch_sizes) {
    if (text == "max") {
      if (mpi)
        usage_fail("--batch-sizes max runs under thread ranks or one process, not under mpirun: find the batch "
                   "there (dpx bench --batch-sizes max --devices cpu:K), then pass it to the MPI sweep");
      batch_values.push_back(0);
      continue;
    }
    char* end = nullptr;
    errno = 0;
    const long long b = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE || b < 1 || b > (int64_t{1} << 30))
      usage_fail("--batch-sizes: '", excerpt(text), "' is not a batch size: give whole numbers of 1 or more, or max "
                 "(the largest batch that trains within --memory-budget)");
    batch_values.push_back(b);
  }
  const bool searching = std::find(batch_values.begin(), batch_values.end(), 0) != batch_values.end();
  uint64_t budget = 0;  // parsed now, so a bad --memory-budget fails before anything runs
  if (!bf.memory_budget.empty()) {
    if (!searching) usage_fail("--memory-budget ", excerpt(bf.memory_budget), " is the budget of --batch-sizes max; "
                               "add max to --batch-sizes, or leave --memory-budget out");
    budget = parse_memory_size(bf.memory_budget, "--memory-budget");
  }
  check_distinct(devices, "--devices");
  check_distinct(bf.parallel, "--parallel");
  check_distinct(bf.scaling, "--scaling");
  check_distinct(bf.algo, "--algo");
  check_distinct(bf.bucket_mb, "--bucket-mb");
  check_distinct(bf.accumulate, "--accumulate");
  check_distinct(bf.optimizer, "--optimizer");
  check_distinct(bf.grad_dtype, "--grad-dtype");
  check_distinct(bf.workers, "--workers");
  // Validate every configuration before running any, so a typo fails in a second, not an hour:
  // the options, the model, its smallest input and the data set's size (each set loaded once).
  std::map<std::string, std::shared_ptr<const data::Dataset>> data_sets;
  auto train_set_of = [&](const parallel::TrainOptions& o) {
    const data::DatasetSpec spec = parallel::Job::data_spec(o);
    const std::string key = detail::concat(spec.name, "|", spec.dir, "|", spec.image_size, "|", spec.channels, "|",
                                           spec.synthetic_size, "|", spec.num_classes, "|", spec.seed);
    auto& set = data_sets[key];
    if (!set) set = data::make_dataset(spec, data::Split::train);
    return set;
  };
  std::vector<SweepConfig> configs;
  std::vector<std::string> skipped;  // device sets larger than the launched MPI world
  // A swept axis (more than one value) names its value in the tag; a single value leaves the tag
  // as it was before these axes could be swept.
  auto axis = [](const auto& values, const std::string& text) {
    return values.size() > 1 ? "_" + text : std::string();
  };
  for (const auto& model : bf.models)
    for (int64_t b : batch_values)
      for (const auto& par : bf.parallel)
        for (const auto& scaling : bf.scaling)
          for (const auto& algo : bf.algo)
            for (double bucket_mb : bf.bucket_mb)
              for (int accumulate : bf.accumulate)
                for (const auto& opt : bf.optimizer)
                  for (const auto& gd : bf.grad_dtype)
                  for (int workers : bf.workers)
                  for (const auto& dev : devices) {
                    parallel::TrainOptions o = per_choice.at({opt, gd});
                    o.workers = workers;
                    o.model = model;
                    o.devices = dev;
                    o.parallel = parse_choice(parallel::kParallelModes, par, "--parallel", "mode");
                    o.algo = o.backend == parallel::Backend::nccl && algo == "ring"
                                 ? parallel::Algorithm::nccl
                                 : with_flag("--algo", [&] { return parallel::parse_algorithm(algo); });
                    o.bucket_mb = bucket_mb;
                    o.accumulate = accumulate;
                    int k = o.ranks();
                    if (mpi && k > processes.size()) {
                      if (std::find(skipped.begin(), skipped.end(), dev) == skipped.end()) skipped.push_back(dev);
                      continue;
                    }
                    if (mpi) o.process_ranks = k;  // ranks 0..k-1 of the job run it
                    // A device is one core unless --threads says otherwise: cpu:K uses K cores.
                    // Under MPI a rank's cores are its process's.
                    if (!mpi && base.threads == 0) o.threads = k;
                    if (o.parallel == parallel::ParallelMode::none && k > 1)
                      usage_fail("--parallel none cannot run --devices ", dev, ": use ddp or dp");
                    // max: validated at 1 per rank; the search sets the batch before the sweep runs.
                    const int64_t per_rank = b > 0 ? b : 1;
                    o.batch_size = scaling == "weak" || b == 0 ? per_rank * k : per_rank;
                    o.validate();
                    parallel::Job::check_fits(o, *train_set_of(o));
                    SweepConfig c{o, scaling, "", "", b == 0, {}, {}, {}};
                    c.key = detail::concat(model, "_b", b > 0 ? std::to_string(b) : std::string("max"), "_", par, axis(bf.scaling, scaling), axis(bf.algo, algo),
                                           axis(bf.bucket_mb, "bucket" + text_of(bucket_mb)),
                                           axis(bf.accumulate, "acc" + text_of(accumulate)), axis(bf.optimizer, opt),
                                           axis(bf.grad_dtype, "grad" + gd), axis(bf.workers, "w" + text_of(workers)));
                    c.tag = c.key + "_" + dev.substr(0, dev.find(':')) + std::to_string(k);
                    configs.push_back(std::move(c));
                    if (!mpi) warn_if_oversubscribed(o, processes.info());
                  }
  if (configs.empty())
    usage_fail("--devices: no device set fits in the ", processes.size(), " ranks of this MPI job (mpirun -np K sets "
               "them); pass sets of at most ", processes.size(), " ranks, or leave --devices out for 1, 2, 4, ... ranks");
  // --out is made only once every configuration is valid: a refused sweep leaves no folder behind.
  std::unique_ptr<OutputLock> lock;  // one sweep at a time writes into --out
  EarlierRuns earlier;                 // --append: the runs already in --out
  if (rank0) {
    // Every file the sweep writes may replace only the same kind of file an earlier dpx bench wrote.
    check_output_dir_path(bf.out_dir, "--out");
    if (bf.append) {
      if (tf.force) usage_fail("--append adds to the earlier run in --out and --force moves it aside: pass one of them");
      if (mpi) usage_fail("--append under an MPI launcher is not built yet: add the repeats without mpirun, or bench "
                          "into another --out");
      if (configs.front().search_batch)
        usage_fail("--append with --batch-sizes max: each sweep searches its batch again; give the batches found");
      std::vector<parallel::TrainOptions> options;
      for (const SweepConfig& c : configs) options.push_back(c.o);
      earlier = read_earlier_runs(bf.out_dir, command_line(), options);
      for (size_t i = 0; i < configs.size(); ++i) {
        configs[i].summaries = earlier.summaries[i];
        configs[i].runs = earlier.reports[i];
      }
    } else if (!tf.force) {
      claim_bench_out(bf.out_dir, false, std::cout);  // refuses an earlier run before any search
    }
    const std::pair<const char*, FileKind> files[] = {{"results.csv", FileKind::results_csv},
                                                      {"runs.csv", FileKind::runs_csv},
                                                      {"ops.csv", FileKind::ops_csv},
                                                      {"command.txt", FileKind::command_txt}};
    for (const auto& [name, kind] : files) check_output_file(bf.out_dir + "/" + name, kind, "--out", tf.force);
    for (const SweepConfig& c : configs)
      for (int run = earlier.runs + 1; run <= earlier.runs + bf.repeat; ++run) {
        check_output_file(bf.out_dir + "/steps/" + steps_file(c, run, earlier.runs + bf.repeat), FileKind::steps_csv,
                          "--out", tf.force);
      }
    // --batch-sizes max: each such configuration's batch, found before the sweep measures any
    // and before --out is made (a search that finds none leaves nothing).
    for (SweepConfig& c : configs) {
      if (!c.search_batch) continue;
      const uint64_t limit = budget > 0 ? budget : available_memory(c.o.device());
      std::cout << "max batch of " << c.tag << ": the largest per rank within " << static_cast<double>(limit) / 1e9
                << " GB (" << (budget > 0 ? "--memory-budget" : c.o.device().is_cuda() ? "the GPU's free memory"
                                                                                   : "the host's available memory")
                << (c.o.device().is_cuda() ? ", per GPU" : ", the process's") << ")" << std::endl;
      // On the host the allocator keeps within the budget, giving cached blocks back before it
      // would pass it, and Winograd's scratch within an eighth of it: the search and the sweep's
      // runs alike.
      if (!c.o.device().is_cuda()) apply_host_memory_budget(limit);
      c.max_batch = find_max_batch(c.o, train_set_of(c.o)->size(), limit, std::cout);
      const MaxBatch& m = c.max_batch;
      if (m.batch == 0)
        fail("--batch-sizes max: no batch of ", c.o.model, " on ", c.o.devices, " trains within ",
             static_cast<double>(limit) / 1e9, " GB",
             m.runs.empty() ? std::string(": ") + m.capped_by
                            : detail::concat(" (", m.runs.front().batch, " per rank peaked at ",
                                             static_cast<double>(m.runs.front().peak_bytes) / 1e9, " GB)"),
             ": raise --memory-budget, or lower --image-size");
      c.o.batch_size = m.batch * c.o.ranks();  // weak and strong scaling alike: that batch on every rank
      std::cout << "  -> " << m.batch << " per rank (" << static_cast<double>(m.peak_bytes) / 1e9 << " GB measured";
      if (m.runs.size() > 1)
        std::cout << "; the line through batches " << m.runs[0].batch << " and " << m.runs[1].batch << " predicted "
                  << m.predicted;
      std::cout << (m.capped_by.empty() ? "" : "; capped by " + m.capped_by) << ")" << std::endl;
    }
    ensure_writable_dir(bf.out_dir);
    lock = std::make_unique<OutputLock>(bf.out_dir, "--out");
    // One run per folder: an earlier run's files would be drawn and reported as this one's.
    if (!bf.append) claim_bench_out(bf.out_dir, tf.force, std::cout);
    ensure_writable_dir(bf.out_dir + "/steps");
    // --append to a single run: its steps files get the run number the repeats' have.
    if (earlier.runs == 1)
      for (const SweepConfig& c : configs) {
        std::error_code ec;
        std::filesystem::rename(bf.out_dir + "/steps/" + steps_file(c, 1, 1), bf.out_dir + "/steps/" + steps_file(c, 1, 2),
                                ec);
      }
  }
  std::string sets;
  for (const auto& d : devices) sets += (sets.empty() ? "" : ",") + d;
  // The sweep's own flags replace the single-run ones they stand for.
  std::vector<std::pair<std::string, std::string>> options = {{"--models", join_values(bf.models)},
                                                              {"--batch-sizes", join_values(bf.batch_sizes)},
                                                              {"--devices", sets},
                                                              {"--parallel", join_values(bf.parallel)},
                                                              {"--scaling", join_values(bf.scaling)},
                                                              {"--algo", join_values(bf.algo)},
                                                              {"--bucket-mb", join_values(bf.bucket_mb)},
                                                              {"--accumulate", join_values(bf.accumulate)},
                                                              {"--optimizer", join_values(bf.optimizer)},
                                                              {"--grad-dtype", join_values(bf.grad_dtype)},
                                                              {"--workers", join_values(bf.workers)},
                                                              {"--repeat", text_of(bf.repeat)},
                                                              {"--noisy-spread", text_of(bf.noisy_spread)},
                                                              {"--out", bf.out_dir}};
  // The optimizer's own --lr and --weight-decay defaults differ: the first optimizer's are shown.
  for (auto& [flag, value] : configs.front().o.flag_values())
    if (flag != "--model" && flag != "--batch-size" && flag != "--devices" && flag != "--parallel" &&
        flag != "--out" && flag != "--algo" && flag != "--bucket-mb" && flag != "--accumulate" &&
        flag != "--optimizer" && flag != "--grad-dtype" && flag != "--workers")
      options.emplace_back(flag, value);
  processes.agree(start_report("bench", options));
  processes.set_comm_timeout(base.comm_timeout_s);
  if (rank0 && mpi) {
    warn_if_oversubscribed(configs.front().o, processes.info());
    for (const auto& row : launch_rows(processes.info())) std::cout << row.first << ": " << row.second << "\n";
    for (const auto& dev : skipped)
      std::cout << "skipping --devices " << dev << ": this MPI job has " << processes.size() << " ranks\n";
  }

  // What made this folder, for dpx plot's captions (under MPI: this process's dpx command).
  if (rank0) write_file_atomic(bf.out_dir + "/command.txt", command_line() + "\n", "--out");
  stop::Graceful graceful;  // a signal ends the configuration in progress at a step, and the sweep
  std::ostringstream runs_csv;
  if (bf.append) runs_csv << earlier.runs_csv;  // its header and rows, in the sweep's order
  else runs_csv << "scaling,run," << parallel::summary_csv_header() << "\n";
  const int total_runs = earlier.runs + bf.repeat;
  std::string ops_csv = earlier.ops_csv.empty() ? op_csv_header() : earlier.ops_csv;  // --append keeps its rows
  ops::profile::set_enabled(bf.profile_ops);
  ops::profile::set_by_shape(bf.profile_shapes);
  std::vector<parallel::Summary> medians;
  const size_t total = configs.size() * static_cast<size_t>(bf.repeat);
  size_t i = 0;
  // The whole sweep runs --repeat times over, rather than each configuration N times in a row, so
  // that a slow spell of a shared machine spreads over every configuration.
  for (int run = earlier.runs + 1; run <= total_runs; ++run) {
    std::map<std::string, parallel::Summary> baselines;  // this run's, for runs.csv
    for (auto& c : configs) {
      ++i;
      std::cout << "[" << i << "/" << total << "] ";
      if (total_runs > 1) std::cout << "run " << run << "/" << total_runs << " ";
      std::cout << c.o.model << " batch " << c.o.batch_size << " " << choice_name(parallel::kParallelModes, c.o.parallel)
                << " " << c.o.devices << " (" << c.tag << ")"
                << std::endl;
      std::ostringstream quiet;  // per-step progress of sweeps stays out of the way
      parallel::TrainReport report;
      ops::profile::reset();  // this run's measured steps only (the training loop skips the warmup)
      if (mpi) {
        // Ranks 0..k-1 run the configuration; the others wait for them (their timeouts apply).
        const int k = c.o.process_ranks;
        std::unique_ptr<parallel::Communicator> part = processes.first(k);
        if (part) report = parallel::train(c.o, quiet, part.get(), processes.info());
        else processes.world().set_activity(detail::concat("idle: configuration ", i, " runs on ranks 0-", k - 1));
        processes.world().barrier_patient(detail::concat("configuration ", i, " on ranks 0-", k - 1));
        // Rank 0 runs every configuration: it tells the idle ranks whether a signal stopped it.
        int stopped = report.stopped_by;
        processes.world().broadcast(&stopped, &stopped, 1, DType::i32, 0);
        report.stopped_by = stopped;
      } else {
        report = parallel::train(c.o, quiet);
      }
      // The run's tensors are freed: its trained model (kept for dpx train's --save; the report,
      // kept for the tables, would hold it to the sweep's end, and every later configuration's
      // memory peaks would count it), then its cached host blocks, sized for this configuration,
      // which would only sit beside the next one's (core/tensor.hpp, the host block cache).
      report.final_model.reset();
      empty_host_cache();
      if (report.stopped_by) {  // the configuration in progress is not kept: its steps are cut short
        std::cout << "stopped by " << stop::signal_name(report.stopped_by) << " during run " << i << " of " << total
                  << "; " << bf.out_dir << "/results.csv and runs.csv hold the " << i - 1 << " before it"
                  << std::endl;
        throw stop::Stopped(report.stopped_by);
      }
      if (mpi && !rank0) continue;
      parallel::Summary s = parallel::summarize(report);
      const MeasuredSteps measured = measured_steps(report, processes.rank());  // for --profile-ops
      parallel::write_steps_csv(bf.out_dir + "/steps/" + steps_file(c, run, total_runs), report);
      c.summaries.push_back(s);
      report.steps.clear();
      report.steps.shrink_to_fit();
      auto it = baselines.find(c.key);
      if (it == baselines.end()) baselines[c.key] = s;
      else parallel::with_baseline(s, it->second);
      runs_csv << c.scaling << "," << run << "," << parallel::summary_csv_row(report, s) << "\n";
      c.runs.push_back(std::move(report));
      std::printf("    %.1f img/s | speedup %.2f | %s-scaling efficiency %.3f | LB %.3f CommE %.3f PE %.3f\n",
                  s.images_per_s, s.speedup, c.scaling.c_str(), s.scaling_efficiency, s.load_balance,
                  s.comm_efficiency, s.parallel_efficiency);
      if (bf.profile_ops) {
        const std::vector<ops::profile::OpStats> op_stats = ops::profile::snapshot();
        std::cout << op_table(op_stats, measured) << peak_op_line();
        ops_csv += op_csv_rows(c.tag, run, op_stats, measured);
        write_file_atomic(bf.out_dir + "/ops.csv", ops_csv);
      }
      std::fflush(stdout);
      // Written after every run, so an interrupted sweep keeps what it measured.
      write_file_atomic(bf.out_dir + "/runs.csv", runs_csv.str());
      write_file_atomic(bf.out_dir + "/results.csv", results_csv(configs, medians, bf.noisy_spread));
    }
  }
  if (!rank0) return;
  print_bench_table(std::cout, configs, medians, total_runs, bf.noisy_spread);
  if (base.verbose) print_conv_choices(std::cout);
  std::cout << "wrote " << bf.out_dir << "/results.csv, " << bf.out_dir << "/runs.csv"
            << (bf.profile_ops ? ", " + bf.out_dir + "/ops.csv" : std::string()) << " and " << bf.out_dir
            << "/steps/*.csv\n";
}

}  // namespace

void add_bench_command(CLI::App& app, parallel::ProcessGroup& processes) {
  auto* cmd = app.add_subcommand("bench",
                                 "sweep models x batch sizes x devices x parallel modes x algorithms x bucket sizes x "
                                 "accumulation x optimizers x gradient dtypes, --repeat times; write results.csv and "
                                 "runs.csv");
  auto o = std::make_shared<parallel::TrainOptions>();
  auto tf = std::make_shared<TrainFlags>();
  auto bf = std::make_shared<BenchFlags>();
  o->dataset = "synthetic";  // throughput work: no files to read, no evaluation
  o->max_steps = 20;
  o->warmup_steps = 3;
  o->epochs = 1;
  tf->no_eval = true;
  add_train_flags(*cmd, *o, *tf, /*for_bench=*/true);
  cmd->add_option("--models", bf->models, "models to sweep")->delimiter(',')->capture_default_str();
  cmd->add_option("--memory-budget", bf->memory_budget,
                  "--batch-sizes max: the memory a configuration may use at its peak (16GB, 512MB, 1.5GiB): the "
                  "process's host memory on CPUs, each GPU's on GPUs (default: what is available now); on CPUs the "
                  "host block cache then gives cached blocks back rather than hold more, and a convolution's Winograd "
                  "scratch stays within an eighth of it, in every run of the sweep");
  cmd->add_option("--batch-sizes", bf->batch_sizes,
                  "batch sizes (per rank with --scaling weak, global with strong); max: the largest per-rank batch "
                  "that trains within --memory-budget, found for each configuration (two short runs predict it, a "
                  "third confirms)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--devices", bf->devices,
                  "device sets, e.g. cpu:1,2,4,8 (K ranks of one core each); under mpirun/srun the ranks are the "
                  "job's first K processes, sets larger than the job are skipped, and the default is 1, 2, 4, ... "
                  "up to every process")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--parallel", bf->parallel, "parallel modes: ddp, dp, none")->delimiter(',')->capture_default_str();
  cmd->add_option("--scaling", bf->scaling, "weak (fixed per-rank batch), strong (fixed global batch), or both")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--algo", bf->algo, algo_help() + "; a list sweeps each")->delimiter(',')->capture_default_str();
  cmd->add_option("--bucket-mb", bf->bucket_mb, std::string(kBucketMbHelp) + "; a list sweeps each")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--accumulate", bf->accumulate, std::string(kAccumulateHelp) + "; a list sweeps each")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--optimizer", bf->optimizer, std::string(kOptimizerHelp) + "; a list sweeps each")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--grad-dtype", bf->grad_dtype, std::string(kGradDtypeHelp) + "; a list sweeps each")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--workers", bf->workers,
                  "data-loader threads per rank (0: load in the training thread); a list sweeps each (results.csv: "
                  "workers, loader_images_per_worker_s)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--repeat", bf->repeat,
                  "run the whole sweep N times over (interleaved: every configuration once, then again, so that a "
                  "slow spell of a shared machine spreads over all of them); results.csv then holds the medians, "
                  "their 95 % confidence intervals from order statistics (N >= 3; [min, max] below 6 runs, column "
                  "ci_coverage gives the level) and spreads; runs.csv every run")
      ->capture_default_str();
  cmd->add_option("--noisy-spread", bf->noisy_spread,
                  "flag a configuration noisy when (max - min) / median of its throughput over the runs exceeds this")
      ->capture_default_str();
  cmd->add_option("--out", bf->out_dir, "directory for results.csv, runs.csv, steps/ and (--profile-ops) ops.csv")
      ->check(output_path())
      ->capture_default_str();
  cmd->add_flag("--append", bf->append,
                "add --repeat more runs of the same sweep to the earlier one in --out (its command.txt, but for "
                "--repeat): results.csv's medians and intervals are then over every run");
  cmd->add_flag("--profile-ops", bf->profile_ops,
                "time every op (kernels/ops.def) of the measured steps, warmup excluded: after each run a table of "
                "op, calls, total ms, ms per step, % of the step time, GFLOP/s (convolutions, linear, matmul), host "
                "ms and kernels per step, by total time, and ops.csv in --out; on CUDA an op's time is read from "
                "CUDA events around it (nothing waits) and its kernels are counted by CUPTI where libcupti loads");
  cmd->add_flag_callback("--profile-shapes", [bf] { bf->profile_ops = bf->profile_shapes = true; },
                         "--profile-ops with each op's calls counted apart per shape (the tensors' shapes and the "
                         "convolution's or pooling's stride, padding, dilation and groups), as torch.profiler's "
                         "record_shapes: a row per op and shape in each run's table and in ops.csv's shape column");
  cmd->callback([o, tf, bf, cmd, &processes] { run_bench(*o, *tf, *bf, cmd->count("--devices") > 0, processes); });
}

}  // namespace dpx::tools
