// `dpx bench`: the measurement studies' sweep (docs/ARCHITECTURE.md, Studies) — every model ×
// batch size × device count × parallel mode, a fixed number of timed steps each — written to
// results.csv (one row per configuration, with speedup and scaling efficiency against the
// configuration with the fewest ranks) and one per-step CSV per configuration.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/stop.hpp"
#include "parallel/job.hpp"
#include "parallel/metrics.hpp"
#include "parallel/report_io.hpp"
#include "parallel/trainer.hpp"
#include "tools/commands.hpp"
#include "tools/print.hpp"
#include "tools/train_flags.hpp"

namespace dpx::tools {

namespace {

struct BenchFlags {
  std::vector<std::string> models = {"lenet5"};
  std::vector<int64_t> batch_sizes = {64};
  std::vector<std::string> devices = {"cpu:1", "cpu:2"};
  std::vector<std::string> parallel = {"ddp"};
  std::string scaling = "weak";
  std::string out_dir = "bench-out";
};

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

// The phases and efficiencies of every configuration, one line each (milliseconds per step).
void print_bench_table(std::ostream& os, const std::vector<std::pair<std::string, parallel::Summary>>& rows) {
  char line[320];
  std::snprintf(line, sizeof line, "\n%-28s %9s %7s %6s | %8s %8s %8s %8s %8s %8s %8s | %5s %5s %5s\n", "configuration",
                "img/s", "speedup", "eff", "load", "forward", "backward", "comm", "exposed", "optim", "wait", "LB",
                "CommE", "PE");
  os << line;
  for (const auto& [tag, s] : rows) {
    const auto& mean_s = s.mean_s;  // (clang 14 cannot capture a structured binding)
    auto ms = [&](Phase p) { return mean_s[static_cast<int>(p)] * 1e3; };
    std::snprintf(line, sizeof line,
                  "%-28s %9.1f %7.2f %6.3f | %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f | %5.3f %5.3f %5.3f\n",
                  tag.c_str(), s.images_per_s, s.speedup, s.scaling_efficiency, ms(Phase::load), ms(Phase::forward),
                  ms(Phase::backward), ms(Phase::comm_total), ms(Phase::comm_exposed), ms(Phase::optimizer),
                  ms(Phase::wait), s.load_balance, s.comm_efficiency, s.parallel_efficiency);
    os << line;
  }
  os << "(ms per step; eff = scaling efficiency against the first row of the same model, batch and mode;\n"
        " LB = load balance, CommE = communication efficiency, PE = parallel efficiency: README.md, Metrics)\n";
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
  apply_train_flags(base, tf);
  if (bf.scaling != "weak" && bf.scaling != "strong")
    usage_fail("--scaling: use weak (fixed per-rank batch) or strong (fixed global batch), not '", bf.scaling, "'");
  if (bf.models.empty() || bf.batch_sizes.empty() || bf.devices.empty() || bf.parallel.empty())
    usage_fail("--models, --batch-sizes, --devices and --parallel each need at least one value");
  std::vector<std::string> devices = mpi && !devices_given ? world_device_sets(processes.size())
                                                            : expand_devices(bf.devices);
  std::unique_ptr<OutputLock> lock;  // one sweep at a time writes into --out
  if (rank0) {
    ensure_writable_dir(bf.out_dir);
    ensure_writable_dir(bf.out_dir + "/steps");
    lock = std::make_unique<OutputLock>(bf.out_dir, "--out");
  }

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
  struct Config { parallel::TrainOptions o; std::string tag; };
  std::vector<Config> configs;
  std::vector<std::string> skipped;  // device sets larger than the launched MPI world
  for (const auto& model : bf.models)
    for (int64_t b : bf.batch_sizes)
      for (const auto& par : bf.parallel)
        for (const auto& dev : devices) {
          parallel::TrainOptions o = base;
          o.model = model;
          o.devices = dev;
          o.parallel = parallel::parse_parallel_mode(par);
          int k = o.ranks();
          if (mpi && k > processes.size()) {
            if (std::find(skipped.begin(), skipped.end(), dev) == skipped.end()) skipped.push_back(dev);
            continue;
          }
          if (mpi) o.process_ranks = k;  // ranks 0..k-1 of the job run it
          // A device is one core unless --threads says otherwise: cpu:K uses K cores. Under MPI
          // a rank's cores are its process's.
          if (!mpi && base.threads == 0) o.threads = k;
          if (o.parallel == parallel::ParallelMode::none && k > 1)
            usage_fail("--parallel none cannot run --devices ", dev, ": use ddp or dp");
          if (b < 1) usage_fail("--batch-sizes: ", b, " is not a batch size");
          o.batch_size = bf.scaling == "weak" ? b * k : b;
          o.validate();
          parallel::Job::check_fits(o, *train_set_of(o));
          std::ostringstream tag;
          tag << model << "_b" << b << "_" << par << "_" << dev.substr(0, dev.find(':')) << k;
          configs.push_back({o, tag.str()});
          if (!mpi) warn_if_oversubscribed(o, processes.info());
        }
  if (configs.empty())
    usage_fail("--devices: no device set fits in the ", processes.size(), " ranks of this MPI job (mpirun -np K sets "
               "them); pass sets of at most ", processes.size(), " ranks, or leave --devices out for 1, 2, 4, ... ranks");
  std::string sets;
  for (const auto& d : devices) sets += (sets.empty() ? "" : ",") + d;
  // The sweep's own flags replace the single-run ones they stand for.
  std::vector<std::pair<std::string, std::string>> options = {{"--models", CLI::detail::join(bf.models)},
                                                              {"--batch-sizes", CLI::detail::join(bf.batch_sizes)},
                                                              {"--devices", sets},
                                                              {"--parallel", CLI::detail::join(bf.parallel)},
                                                              {"--scaling", bf.scaling},
                                                              {"--out", bf.out_dir}};
  for (auto& [flag, value] : base.flag_values())
    if (flag != "--model" && flag != "--batch-size" && flag != "--devices" && flag != "--parallel" && flag != "--out")
      options.emplace_back(flag, value);
  processes.agree(start_report("bench", options));
  processes.set_comm_timeout(base.comm_timeout_s);
  if (rank0 && mpi) {
    warn_if_oversubscribed(configs.front().o, processes.info());
    for (const auto& row : launch_rows(processes.info())) std::cout << row.first << ": " << row.second << "\n";
    for (const auto& dev : skipped)
      std::cout << "skipping --devices " << dev << ": this MPI job has " << processes.size() << " ranks\n";
  }

  stop::Graceful graceful;  // a signal ends the configuration in progress at a step, and the sweep
  std::ostringstream csv;
  csv << "scaling," << parallel::summary_csv_header() << "\n";
  std::map<std::string, parallel::Summary> baselines;  // model/batch/parallel -> fewest ranks
  std::vector<std::pair<std::string, parallel::Summary>> done;
  size_t i = 0;
  for (auto& c : configs) {
    ++i;
    std::cout << "[" << i << "/" << configs.size() << "] " << c.o.model << " batch " << c.o.batch_size << " "
              << parallel::parallel_mode_name(c.o.parallel) << " " << c.o.devices << std::endl;
    std::ostringstream quiet;  // per-step progress of sweeps stays out of the way
    parallel::TrainReport report;
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
    if (report.stopped_by) {  // the configuration in progress is not kept: its steps are cut short
      std::cout << "stopped by " << stop::signal_name(report.stopped_by) << " during configuration " << i << " of "
                << configs.size() << "; " << bf.out_dir << "/results.csv holds the " << i - 1 << " before it"
                << std::endl;
      throw stop::Stopped(report.stopped_by);
    }
    if (mpi && !rank0) continue;
    parallel::Summary s = parallel::summarize(report);
    std::string key = c.tag.substr(0, c.tag.rfind('_'));
    auto it = baselines.find(key);
    if (it == baselines.end())
      baselines[key] = s;
    else
      parallel::with_baseline(s, it->second);
    parallel::write_steps_csv(bf.out_dir + "/steps/" + c.tag + ".csv", report);
    csv << bf.scaling << "," << parallel::summary_csv_row(report, s) << "\n";
    std::printf("    %.1f img/s | speedup %.2f | %s-scaling efficiency %.3f | LB %.3f CommE %.3f PE %.3f\n",
                s.images_per_s, s.speedup, bf.scaling.c_str(), s.scaling_efficiency, s.load_balance,
                s.comm_efficiency, s.parallel_efficiency);
    std::fflush(stdout);
    // Written after every configuration, so an interrupted sweep keeps what it measured.
    write_file_atomic(bf.out_dir + "/results.csv", csv.str());
    done.emplace_back(c.tag, s);
  }
  if (!rank0) return;
  print_bench_table(std::cout, done);
  std::cout << "wrote " << bf.out_dir << "/results.csv and " << bf.out_dir << "/steps/*.csv\n";
}

}  // namespace

void add_bench_command(CLI::App& app, parallel::ProcessGroup& processes) {
  auto* cmd = app.add_subcommand("bench", "sweep models x batch sizes x devices x parallel modes; write results.csv");
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
  cmd->add_option("--batch-sizes", bf->batch_sizes, "batch sizes (per rank with --scaling weak, global with strong)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--devices", bf->devices,
                  "device sets, e.g. cpu:1,2,4,8 (K ranks of one core each); under mpirun/srun the ranks are the "
                  "job's first K processes, sets larger than the job are skipped, and the default is 1, 2, 4, ... "
                  "up to every process")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--parallel", bf->parallel, "parallel modes: ddp, dp, none")->delimiter(',')->capture_default_str();
  cmd->add_option("--scaling", bf->scaling, "weak (fixed per-rank batch) or strong (fixed global batch)")
      ->capture_default_str();
  cmd->add_option("--out", bf->out_dir, "directory for results.csv and steps/")->capture_default_str();
  cmd->callback([o, tf, bf, cmd, &processes] { run_bench(*o, *tf, *bf, cmd->count("--devices") > 0, processes); });
}

}  // namespace dpx::tools
