// `dpx collective`: nccl-tests' all_reduce_perf & co. for dpx's communicators. The flags are
// nccl-tests' (-b -e -f -i -n -w -c -o -d -r) plus the collective, backend, ranks and algorithm;
// the work is parallel::run_collective (parallel/collective_bench.hpp).
#include <iostream>
#include <memory>

#include "core/error.hpp"
#include "parallel/collective_bench.hpp"
#include "parallel/threads_backend.hpp"
#include "tools/commands.hpp"

namespace dpx::tools {

namespace {

struct CollectiveFlags {
  parallel::CollectiveOptions o;
  std::string min_bytes = "32M", max_bytes = "32M", step_bytes = "1M";
};

void run(CLI::App& cmd, CollectiveFlags& f) {
  parallel::CollectiveOptions o = f.o;
  o.min_bytes = parallel::parse_bytes(f.min_bytes, "-b/--minbytes");
  o.max_bytes = parallel::parse_bytes(f.max_bytes, "-e/--maxbytes");
  o.step_bytes = parallel::parse_bytes(f.step_bytes, "-i/--stepbytes");
  const bool factor = cmd.count("--stepfactor") > 0, additive = cmd.count("--stepbytes") > 0;
  if (factor && additive) usage_fail("-f/--stepfactor and -i/--stepbytes: give one, not both");
  if (factor && o.step_factor < 2)
    usage_fail("-f/--stepfactor: ", o.step_factor, " would not grow the size; use 2 or more, or -i/--stepbytes");
  if (!factor) o.step_factor = 0;  // nccl-tests: additive steps of -i unless -f is given
  parallel::validate(o);
  if (o.ranks > parallel::available_cpus())
    std::cerr << "dpx: warning: " << o.ranks << " ranks on " << parallel::available_cpus()
              << " CPUs: ranks take turns, so times include waiting for a CPU\n";
  parallel::CollectiveReport report = parallel::run_collective(o, std::cout);
  if (report.failed > 0)
    fail(report.failed, " of ", report.rows.size(), " measurements gave wrong values (see #wrong above)");
}

}  // namespace

void add_collective_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "collective", "nccl-tests-style benchmark of one collective: time, algbw, busbw, #wrong per size");
  auto f = std::make_shared<CollectiveFlags>();
  parallel::CollectiveOptions& o = f->o;
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // as getopt: the last wins
  cmd->add_option("-t,--collective", o.collective,
                  "all_reduce, broadcast, reduce, all_gather or reduce_scatter")->capture_default_str();
  cmd->add_option("--backend", o.backend, "threads (nccl, mpi and p2p come later)")->capture_default_str();
  cmd->add_option("--ranks", o.ranks, "number of ranks")->capture_default_str();
  cmd->add_option("--algo", o.algo, "ring, tree, naive, rhd, or all (one table each)")->capture_default_str();
  cmd->add_option("-b,--minbytes", f->min_bytes, "smallest size, bytes with an optional K, M or G")
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", f->max_bytes, "largest size")->capture_default_str();
  cmd->add_option("-f,--stepfactor", o.step_factor, "multiply the size by this (>= 2) from one row to the next");
  cmd->add_option("-i,--stepbytes", f->step_bytes, "add this to the size from one row to the next (without -f)")
      ->capture_default_str();
  cmd->add_option("-n,--iters", o.iters, "timed iterations per size")->capture_default_str();
  cmd->add_option("-w,--warmup_iters", o.warmup_iters, "untimed iterations before them")->capture_default_str();
  cmd->add_option("-c,--check", o.check, "1: check the results and count wrong elements; 0: do not")
      ->capture_default_str();
  cmd->add_option("-o,--op", o.op, "sum, prod, max, min or avg")->capture_default_str();
  cmd->add_option("-d,--datatype", o.datatype, "float, double, half, bfloat16, int32, int64 or uint8")
      ->capture_default_str();
  cmd->add_option("-r,--root", o.root, "root rank of broadcast and reduce")->capture_default_str();
  cmd->add_flag("--pin", o.pin_threads, "pin rank r to CPU r mod (number of CPUs)");
  cmd->add_option("--csv", o.csv_path, "also write one row per measurement to this CSV file");
  cmd->callback([cmd, f] { run(*cmd, *f); });
}

}  // namespace dpx::tools
