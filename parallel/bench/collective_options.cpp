// `dpx collective`'s flags: size parsing with nccl-tests' K/M/G suffixes, the size steps, the
// dtype names nccl-tests prints, busbw factors, and the checks that turn bad input into
// dpx::UsageError (exit code 2) before anything runs.
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/choices.hpp"
#include "core/error.hpp"
#include "parallel/bench/collective_bench.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "parallel/comm/net_sim.hpp"

namespace dpx::parallel {

namespace {

constexpr int kMaxRanks = 1024;
constexpr int kThreadRanksPerCpu = 32;
constexpr size_t kMaxSizeSteps = 10000;

}  // namespace

size_t parse_bytes(std::string_view text, std::string_view flag) {
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  // Like nccl-tests: a number, then optionally K, M or G (powers of 1024); "KB"/"KiB" also read.
  size_t pos = 0;
  double value = -1;
  try {
    value = std::stod(s, &pos);
  } catch (const std::exception&) {
    usage_fail(flag, ": '", text, "' is not a size (use bytes, or a number with K, M or G, e.g. 64M)");
  }
  std::string unit = s.substr(pos);
  double scale = 1;
  if (!unit.empty()) {
    char u = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    std::string rest = unit.substr(1);
    if ((u != 'K' && u != 'M' && u != 'G') || !(rest.empty() || rest == "B" || rest == "iB" || rest == "b"))
      usage_fail(flag, ": '", text, "' has an unknown unit (use K, M or G, powers of 1024 as in nccl-tests)");
    scale = u == 'K' ? 1024.0 : u == 'M' ? 1024.0 * 1024 : 1024.0 * 1024 * 1024;
  }
  if (!(value >= 0) || !std::isfinite(value)) usage_fail(flag, ": '", text, "' is not a size of zero bytes or more");
  const double bytes = std::floor(value * scale);
  if (bytes > 1e15) usage_fail(flag, ": '", text, "' is too large");
  return static_cast<size_t>(bytes);
}

std::vector<size_t> size_steps(const CollectiveOptions& o) {
  std::vector<size_t> sizes;
  for (size_t s = o.min_bytes; s <= o.max_bytes;) {
    if (sizes.size() == kMaxSizeSteps)
      usage_fail("these flags ask for more than ", kMaxSizeSteps, " sizes from -b ", o.min_bytes, " to -e ",
                 o.max_bytes, ": use a larger -i/--stepbytes or -f/--stepfactor");
    sizes.push_back(s);
    const size_t next = o.step_factor != 0 ? s * o.step_factor : s + o.step_bytes;
    if (next <= s) break;  // overflow, or a step that would repeat the size forever
    s = next;
  }
  return sizes;
}

double bus_factor(Collective c, int ranks) {
  const double n = ranks;
  switch (c) {
    case Collective::all_reduce: return 2.0 * (n - 1) / n;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all:
    case Collective::gather:
    case Collective::scatter: return (n - 1) / n;
    default: return 1.0;  // broadcast, reduce, sendrecv
  }
}

std::string_view nccl_type_name(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::f16: return "half";
    case DType::bf16: return "bfloat16";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
  }
  return "?";
}

DType parse_bench_dtype(std::string_view name) {
  try {
    return parse_dtype(name);
  } catch (const UsageError&) {
    usage_fail("-d/--datatype: unknown or unsupported type '", name,
               "': use float, double, half, bfloat16, int32, int64 or uint8 (or f32, f64, f16, bf16, i32, i64, u8)");
  }
}

void validate(const CollectiveOptions& o) {
  const Collective c = with_flag("-t/--collective", [&] {
    try {
      return parse_collective(o.collective);
    } catch (const UsageError& e) {
      if (!o.collective.empty() && std::isdigit(static_cast<unsigned char>(o.collective[0])))
        usage_fail(e.what(), " (nccl-tests' -t is its thread count; here the number of ranks is --ranks)");
      throw;
    }
  });
  // What this dpx has (p2p and nccl come with the CUDA build).
  const char* const backends = kMpiBuilt && kP2PBuilt ? "threads, p2p, mpi or nccl"
                               : kMpiBuilt            ? "threads or mpi"
                               : kP2PBuilt            ? "threads, p2p or nccl"
                                                      : "threads";
  if (!o.gpus.empty() && o.backend != "p2p") usage_fail("--gpus: only with --backend p2p");
  with_flag("--gpus", [&] { return parse_gpu_list(o.gpus); });
  if (o.backend == "p2p") {
    if (const std::string why = p2p_unavailable_reason(); !why.empty()) usage_fail("--backend p2p: ", why);
    if (o.process_ranks > 1)
      usage_fail("--backend p2p under MPI with ", o.process_ranks, " processes: p2p's ranks are threads of one "
                 "process; run dpx without mpirun");
  } else if (o.backend == "nccl") {
    if (!kNcclBuilt)
      usage_fail("--backend nccl: not built (this dpx has no CUDA backend; configure with -DDPX_CUDA=ON on a machine "
                 "with CUDA, cuDNN and NCCL); use --backend ", backends);
    if (o.process_ranks > 0 && o.ranks != o.process_ranks)
      usage_fail("--ranks ", o.ranks, " under MPI with ", o.process_ranks, " processes: with --backend nccl each process "
                 "drives one GPU (mpirun -np K sets K); drop --ranks");
    if (o.algo != "nccl" && o.algo != "all")
      usage_fail("--algo ", o.algo, " with --backend nccl: NCCL chooses its own algorithm (NCCL_ALGO=Ring|Tree sets "
                 "it); pass --algo nccl or leave --algo out");
    if (!o.net_sim.empty())
      usage_fail("--net-sim shapes the exchanges of dpx's own algorithms; NCCL's collectives are out of its reach: "
                 "drop --net-sim with --backend nccl");
  } else if (o.backend == "mpi") {
#ifndef DPX_WITH_MPI
    usage_fail("--backend mpi: not built (configure with -DDPX_MPI=ON where MPI is installed); use --backend threads");
#endif
    if (o.process_ranks == 0)
      usage_fail("--backend mpi: every rank is a process, started by an MPI launcher: run dpx under mpirun or srun "
                 "(e.g. mpirun -np 4 dpx collective --backend mpi ...)");
    if (o.ranks != o.process_ranks)
      usage_fail("--ranks ", o.ranks, " under MPI with ", o.process_ranks, " processes: each process is one rank (mpirun "
                 "-np K sets K); drop --ranks");
  } else if (o.backend == "threads") {
    if (o.process_ranks > 1)
      usage_fail("--backend threads under MPI with ", o.process_ranks, " processes: each process would run its own "
                 "benchmark of thread ranks; use --backend mpi (the default under mpirun), or run dpx without mpirun");
  } else {
    usage_fail("--backend: unknown backend '", o.backend, "': use ", backends,
               kNcclBuilt ? "" : " (p2p and nccl need a CUDA build)");
  }
  if (o.ranks < 1 || o.ranks > kMaxRanks)
    usage_fail("--ranks: ", o.ranks, " is not a number of ranks from 1 to ", kMaxRanks);
  const int cpus = available_cpus();
  if (o.backend == "threads" && o.ranks > kThreadRanksPerCpu * cpus)
    usage_fail("--ranks ", o.ranks, " is more than ", kThreadRanksPerCpu, " thread ranks per CPU of this process (",
               cpus, " CPUs: at most ", kThreadRanksPerCpu * cpus, "): thread ranks take turns on the CPUs, so more "
               "take minutes per size and measure the scheduler more than the collective (64 ranks on 2 CPUs: 22 s "
               "for the default size); for more ranks run MPI processes on more machines (--backend mpi)");
  if (o.algo != "all" && o.backend != "nccl") {
    const Algorithm a = with_flag("--algo", [&] { return parse_algorithm(o.algo); });
    if (a == Algorithm::nccl)
      usage_fail("--algo nccl is NCCL's own collectives: it needs --backend nccl (GPUs)");
    if (a == Algorithm::mpi && o.backend != "mpi")
      usage_fail("--algo mpi is the MPI library's own collectives: it needs --backend mpi, under mpirun");
    if (!algorithm_applies(a, c))
      usage_fail("--algo ", o.algo, " does not apply to -t ", collective_name(c), ": use ", algorithm_choices(c),
                 ", or all");
  }
  if (o.ranks_per_node < 0)
    usage_fail("--ranks-per-node: ", o.ranks_per_node, " is not a number of ranks per node (0: the real nodes)");
  if (!(o.comm_timeout_s > 0) || !std::isfinite(o.comm_timeout_s))
    usage_fail("--comm-timeout: ", o.comm_timeout_s, " is not a positive number of seconds");
  if (!(o.link_gbps >= 0) || !std::isfinite(o.link_gbps))
    usage_fail("--link-gbps: ", o.link_gbps, " is not a rate in Gbit/s (0: unknown)");
  if (const NetSim net = parse_net_sim(o.net_sim, "--net-sim"); net.enabled()) {
    if (net.message_s(o.max_bytes) >= o.comm_timeout_s)
      usage_fail("--net-sim ", o.net_sim, ": one exchange of the largest size (", o.max_bytes, " bytes) would take ",
                 net.message_s(o.max_bytes), " s, beyond --comm-timeout ", o.comm_timeout_s,
                 " s: dial in a faster network, or raise --comm-timeout");
    if (o.algo == "mpi" || (o.algo == "all" && o.backend == "mpi"))
      usage_fail("--net-sim shapes the exchanges of dpx's own algorithms; the MPI library's collectives (--algo ",
                 o.algo, ") are out of its reach: pass --algo ring, tree, naive, rhd or hier");
  }
  parse_bench_dtype(o.datatype);
  with_flag("-o/--op", [&] { return parse_reduce_op(o.op); });
  if (is_rooted(c) && (o.root < 0 || o.root >= o.ranks))
    usage_fail("-r/--root: ", o.root, " is not a rank (0 to ", o.ranks - 1, ")");
  if (o.min_bytes > o.max_bytes)
    usage_fail("-b/--minbytes ", o.min_bytes, " is larger than -e/--maxbytes ", o.max_bytes);
  if (o.step_factor != 0) {
    if (o.step_factor < 2)
      usage_fail("-f/--stepfactor: ", o.step_factor, " would not grow the size; use 2 or more, or -i/--stepbytes");
    if (o.min_bytes == 0 && o.max_bytes > 0)
      usage_fail("-f/--stepfactor cannot grow a size of 0: start at -b/--minbytes 1 or more");
  } else if (o.step_bytes == 0 && o.min_bytes < o.max_bytes) {
    usage_fail("-i/--stepbytes: 0 would never reach -e/--maxbytes; use 1 or more, or -f/--stepfactor");
  }
  if (o.iters < 1) usage_fail("-n/--iters: ", o.iters, " is not a number of timed iterations (1 or more)");
  if (o.warmup_iters < 0) usage_fail("-w/--warmup_iters: ", o.warmup_iters, " is negative");
  if (o.check != 0 && o.check != 1) usage_fail("-c/--check: use 1 (count wrong elements) or 0, not ", o.check);
  size_steps(o);
}

std::vector<Algorithm> selected_algorithms(const CollectiveOptions& o) {
  if (o.backend == "nccl") return {Algorithm::nccl};
  if (o.algo != "all") return {parse_algorithm(o.algo)};
  const Collective c = parse_collective(o.collective);
  std::vector<Algorithm> algos;
  for (Algorithm a : kAlgorithms)
    if (algorithm_applies(a, c)) algos.push_back(a);
  if (o.backend == "mpi") algos.push_back(Algorithm::mpi);
  return algos;
}

std::string collective_csv_row(const CollectiveRow& r) {
  char nums[192];
  std::snprintf(nums, sizeof(nums), "%.3f,%.6f,%.6f,%lld,%d", r.time_us, r.algbw_gbs, r.busbw_gbs,
                static_cast<long long>(r.wrong), r.nodes);
  char limit[32] = "";
  if (r.limit_gbs > 0) std::snprintf(limit, sizeof(limit), "%.6f", r.limit_gbs);
  return detail::concat(r.collective, ",", r.algo, ",", r.backend, ",", r.ranks, ",", r.bytes, ",", r.count, ",",
                        r.dtype, ",", r.op, ",", r.root, ",", r.in_place ? "in" : "out", ",", nums, ",", limit, ",",
                        r.limit_source);
}

}  // namespace dpx::parallel
