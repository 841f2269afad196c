// `dpx collective`: nccl-tests' all_reduce_perf & co. for dpx's communicators. The flags are
// nccl-tests' (-b -e -f -i -n -w -c -o -d -r) plus the collective, backend, ranks and algorithm;
// the work is parallel::run_collective (parallel/bench/collective_bench.hpp).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"
#include "parallel/bench/collective_bench.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "tools/commands.hpp"
#include "tools/train_flags.hpp"

namespace dpx::tools {

namespace {

struct CollectiveFlags {
  parallel::CollectiveOptions o;
  std::string min_bytes = "32M", max_bytes = "32M", step_bytes = "1M";
  bool force = false;  // --force: replace a --csv that dpx did not write
};

// "nccl,p2p" -> {"nccl", "p2p"}: --backend may name several, run one after the other.
std::vector<std::string> split_backends(const std::string& text) {
  std::vector<std::string> names;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    names.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

void run(CLI::App& cmd, CollectiveFlags& f, parallel::ProcessGroup& processes) {
  parallel::CollectiveOptions o = f.o;
  if (processes.launched()) {  // each process is one rank; the library's backend by default
    o.process_ranks = processes.size();
    if (cmd.count("--backend") == 0) o.backend = "mpi";
    if (cmd.count("--ranks") == 0) o.ranks = processes.size();
  }
  if (cmd.count("--algo") == 0) {  // ring, or the first of dpx's algorithms that applies (gather, scatter: tree)
    try {
      o.algo = parallel::algorithm_name(parallel::algorithm_for(parallel::parse_collective(o.collective),
                                                                parallel::Algorithm::ring));
    } catch (const UsageError&) {  // a bad -t: validate() says so, naming the flag
    }
  }
  o.min_bytes = parallel::parse_bytes(f.min_bytes, "-b/--minbytes");
  o.max_bytes = parallel::parse_bytes(f.max_bytes, "-e/--maxbytes");
  o.step_bytes = parallel::parse_bytes(f.step_bytes, "-i/--stepbytes");
  const bool factor = cmd.count("--stepfactor") > 0, additive = cmd.count("--stepbytes") > 0;
  if (factor && additive) usage_fail("-f/--stepfactor and -i/--stepbytes: give one, not both");
  if (factor && o.step_factor < 2)
    usage_fail("-f/--stepfactor: ", o.step_factor, " would not grow the size; use 2 or more, or -i/--stepbytes");
  if (!factor) o.step_factor = 0;  // nccl-tests: additive steps of -i unless -f is given
  const std::vector<std::string> backends = split_backends(o.backend);
  // The options of one backend of the list: nccl's one algorithm is NCCL's own unless --algo says.
  auto options_for = [&](const std::string& backend) {
    parallel::CollectiveOptions each = o;
    each.backend = backend;
    if (backend == "nccl" && cmd.count("--algo") == 0) each.algo = "nccl";
    return each;
  };
  for (const std::string& b : backends) parallel::validate(options_for(b));  // all checked before any runs
  if (!o.csv_path.empty() && processes.rank() == 0)  // rank 0 writes it
    check_output_file(o.csv_path, FileKind::collective_csv, "--csv", f.force);
  if (backends.size() == 1) o = options_for(backends[0]);
  processes.agree(start_report(
      "collective", {{"-t", o.collective}, {"--backend", o.backend}, {"--ranks", std::to_string(o.ranks)},
                     {"--algo", o.algo}, {"-b", std::to_string(o.min_bytes)}, {"-e", std::to_string(o.max_bytes)},
                     {"-i", std::to_string(o.step_bytes)}, {"-f", std::to_string(o.step_factor)},
                     {"-n", std::to_string(o.iters)}, {"-w", std::to_string(o.warmup_iters)},
                     {"-c", std::to_string(o.check)}, {"-o", o.op}, {"-d", o.datatype}, {"-r", std::to_string(o.root)},
                     {"--ranks-per-node", std::to_string(o.ranks_per_node)}, {"--gpus", o.gpus},
                     {"--csv", o.csv_path}}));
  processes.set_comm_timeout(o.comm_timeout_s);
  if (!processes.launched() && o.backend == "threads" && o.ranks > parallel::available_cpus())
    std::cerr << "dpx: warning: " << o.ranks << " ranks on " << parallel::available_cpus()
              << " CPUs: ranks take turns, so times include waiting for a CPU\n";
  parallel::CollectiveReport report;
  if (backends.size() == 1) {
    report = parallel::run_collective(o, std::cout, &processes);
  } else {  // one run per backend; the CSV (all of them) is written at the end
    std::string csv = std::string(parallel::kCollectiveCsvHeader) + "\n";
    for (const std::string& b : backends) {
      parallel::CollectiveOptions each = options_for(b);
      each.csv_path.clear();
      const parallel::CollectiveReport one = parallel::run_collective(each, std::cout, &processes);
      report.rows.insert(report.rows.end(), one.rows.begin(), one.rows.end());
      report.failed += one.failed;
      for (const auto& row : one.rows) csv += parallel::collective_csv_row(row) + "\n";
    }
    // After several backends: every backend's and algorithm's busbw, side by side.
    std::vector<std::string> columns;
    auto column_of = [](const parallel::CollectiveRow& r) { return r.backend + "/" + r.algo; };
    for (const auto& r : report.rows)
      if (std::find(columns.begin(), columns.end(), column_of(r)) == columns.end()) columns.push_back(column_of(r));
    parallel::print_busbw_side_by_side(std::cout, "backends side by side", columns, report.rows, column_of, 14);
    if (!o.csv_path.empty()) write_file_atomic(o.csv_path, csv, "--csv");
  }
  // Rank 0 checked every rank's results (the #wrong counts are summed over ranks).
  if (report.failed > 0)
    fail(report.failed, " of ", report.rows.size(), " measurements gave wrong values (see #wrong above)");
}

}  // namespace

void add_collective_command(CLI::App& app, parallel::ProcessGroup& processes) {
  auto* cmd = app.add_subcommand(
      "collective", "nccl-tests-style benchmark of one collective: time, algbw, busbw, #wrong per size");
  auto f = std::make_shared<CollectiveFlags>();
  parallel::CollectiveOptions& o = f->o;
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // as getopt: the last wins
  cmd->add_option("-t,--collective", o.collective,
                  "all_reduce, broadcast, reduce, all_gather, reduce_scatter, sendrecv, all_to_all (alltoall), gather "
                  "or scatter; busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, "
                  "all_to_all, gather and scatter, 1 for broadcast, reduce and sendrecv (nccl-tests' factors)")
      ->capture_default_str();
  cmd->add_option("--backend", o.backend,
                  std::string("threads (ranks are threads of this process, buffers in host memory)") +
                      (parallel::kP2PBuilt ? "; p2p (thread ranks with buffers on GPUs: dpx's algorithms over CUDA "
                                             "device-to-device copies and reduction kernels; several ranks may share "
                                             "a GPU, see --gpus; run on one H100, benchmarks/RESULTS.md)"
                                           : "; p2p is not built in (no CUDA)") +
                      (parallel::kMpiBuilt ? "; mpi (ranks are the processes of mpirun/srun; the default there)"
                                           : "; the mpi backend is not built in") +
                      (parallel::kNcclBuilt ? "; nccl (NCCL's collectives on GPUs, device buffers; --ranks K: one "
                                              "thread per GPU, cuda:0 to cuda:K-1; under mpirun one GPU per process, "
                                              "by local rank; compiled, not yet run on GPUs)"
                                            : "; nccl is not built in (no CUDA)") +
                      ". Several, comma-separated (e.g. nccl,p2p), run one after the other and end with their "
                      "busbw side by side")
      ->capture_default_str();
  cmd->add_option("--gpus", o.gpus,
                  "--backend p2p: the GPUs, comma-separated (e.g. 0,1); rank r runs on the (r mod n)-th, so --ranks "
                  "4 --gpus 0 puts four ranks on GPU 0 (default: every visible GPU)");
  cmd->add_option("--ranks", o.ranks, "number of thread ranks (under MPI: the processes, set by mpirun -np)")
      ->capture_default_str();
  std::string which;  // the algorithms of each pattern that not all of them have
  for (parallel::Collective c : {parallel::Collective::sendrecv, parallel::Collective::all_to_all,
                                 parallel::Collective::gather, parallel::Collective::scatter})
    which += detail::concat("; ", parallel::collective_name(c), ": ", parallel::algorithm_choices(c));
  cmd->add_option("--algo", o.algo,
                  parallel::algorithm_choices() + ", or all (one table each, then busbw side by side)" + which +
                      " (gather's and scatter's default: tree)")
      ->capture_default_str();
  cmd->add_option("--ranks-per-node", o.ranks_per_node,
                  "for hier: take each group of this many consecutive ranks as one node (0: the real nodes)")
      ->capture_default_str();
  cmd->add_option("--comm-timeout", o.comm_timeout_s,
                  "seconds a rank may wait in one collective before it prints a stall report and ends the job")
      ->capture_default_str();
  cmd->add_option("--net-sim", o.net_sim,
                  "RATE,LATENCY: every exchange of the thread ranks takes at least latency + bytes / rate, really "
                  "waiting, as on that network (e.g. 10gbit,5us or 1GB,50us)")
      ->capture_default_str();
  cmd->add_option("--link-gbps", o.link_gbps,
                  "the network link's rate in Gbit/s, printed as the busbw limit across nodes (0: unknown)")
      ->capture_default_str();
  cmd->add_option("-b,--minbytes", f->min_bytes, "smallest size, bytes with an optional K, M or G")
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", f->max_bytes, "largest size")->capture_default_str();
  cmd->add_option("-f,--stepfactor", o.step_factor, "multiply the size by this (>= 2) from one row to the next")
      ->check(non_negative());
  cmd->add_option("-i,--stepbytes", f->step_bytes, "add this to the size from one row to the next (without -f)")
      ->capture_default_str();
  cmd->add_option("-n,--iters", o.iters, "timed iterations per size")->capture_default_str();
  cmd->add_option("-w,--warmup_iters", o.warmup_iters, "untimed iterations before them")->capture_default_str();
  cmd->add_option("-c,--check", o.check, "1: check the results and count wrong elements; 0: do not")
      ->capture_default_str();
  cmd->add_option("-o,--op", o.op, "sum, prod, max, min or avg")->capture_default_str();
  cmd->add_option("-d,--datatype", o.datatype, "float, double, half, bfloat16, int32, int64 or uint8")
      ->capture_default_str();
  cmd->add_option("-r,--root", o.root, "root rank of broadcast, reduce, gather and scatter")->capture_default_str();
  cmd->add_flag("--pin", o.pin_threads, "pin rank r to CPU r mod (number of CPUs)");
  cmd->add_option("--csv", o.csv_path,
                  "also write one row per measurement to this CSV file (rewritten after every size, so a stopped run "
                  "keeps what it measured)")
      ->check(output_path());
  cmd->add_flag("--force", f->force,
                "replace a --csv file that exists and was not written by dpx collective (or is a link: the link is "
                "replaced, its target left alone)");
  cmd->callback([cmd, f, &processes] { run(*cmd, *f, processes); });
}

}  // namespace dpx::tools
