// `dpx collective`'s engine: an nccl-tests-style micro-benchmark of one collective over a range
// of sizes, out-of-place and in-place, timed, checked against closed-form results, printed as
// nccl-tests' table (same columns, same algbw/busbw definitions) and optionally written as CSV.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/comm/algorithms/algorithms.hpp"
#include "parallel/runtime/process_group.hpp"

namespace dpx::parallel {

// The flags of `dpx collective`, with nccl-tests' defaults where nccl-tests has the flag.
struct CollectiveOptions {
  std::string collective = "all_reduce";  // -t/--collective
  std::string backend = "threads";        // --backend: threads, p2p (thread ranks on GPUs), or mpi (the default
                                          // under mpirun)
  std::string gpus;                       // --gpus: p2p's GPUs, rank r on the (r mod n)-th ("": every visible one)
  int ranks = 2;                          // --ranks (under MPI: the number of processes)
  int process_ranks = 0;                  // the MPI job's processes (0: not launched); not a flag
  std::string algo = "ring";              // --algo: ring, tree, naive, rhd, hier, mpi or all (those that apply)
  int ranks_per_node = 0;                 // --ranks-per-node: hier's nodes (0: the real nodes)
  double comm_timeout_s = 300;            // --comm-timeout
  double link_gbps = 0;                   // --link-gbps: the network's rate, printed as busbw's limit
  std::string net_sim;                    // --net-sim RATE,LATENCY: every exchange as on that network
  size_t min_bytes = size_t{32} << 20;    // -b/--minbytes
  size_t max_bytes = size_t{32} << 20;    // -e/--maxbytes
  size_t step_bytes = size_t{1} << 20;    // -i/--stepbytes: additive step, used when step_factor == 0
  size_t step_factor = 0;                 // -f/--stepfactor: multiplicative step (>= 2); 0 = additive
  int iters = 20;                         // -n/--iters
  int warmup_iters = 5;                   // -w/--warmup_iters
  int check = 1;                          // -c/--check: 1 = count wrong elements
  std::string op = "sum";                 // -o/--op
  std::string datatype = "float";         // -d/--datatype
  int root = 0;                           // -r/--root (broadcast, reduce, gather and scatter)
  bool pin_threads = false;               // --pin: rank r on CPU r mod ncpus
  std::string csv_path;                   // --csv FILE
  size_t memcpy_bytes = size_t{64} << 20; // per-rank buffer of the memcpy bandwidth line; 0 skips it
};

// One measurement: one size, one placement, one algorithm (a CSV row).
struct CollectiveRow {
  std::string collective, algo, backend;
  int ranks = 0;
  int nodes = 1;     // distinct nodes in hier's layout: --ranks-per-node groups, the MPI job's nodes, or 1
  size_t bytes = 0;  // nccl-tests' size column: the larger of the send and receive sizes
  size_t count = 0;  // nccl-tests' count column: elements per call (per rank, or per block, where the
                     // collective has per-rank blocks: all_gather, reduce_scatter, all_to_all, gather, scatter)
  std::string dtype, op;
  int root = -1;  // -1 for collectives without a root, as nccl-tests prints
  bool in_place = false;
  double time_us = 0, algbw_gbs = 0, busbw_gbs = 0;
  int64_t wrong = -1;  // wrong elements summed over ranks; -1 when not checked
  // The busbw this run cannot exceed, and what sets it: "net-sim" (--net-sim's rate), "link"
  // (--link-gbps / 8) or "memcpy" (one rank's memcpy bandwidth, ranks on one node); 0 and "": unknown.
  double limit_gbs = 0;
  std::string limit_source;
};

struct CollectiveReport {
  std::vector<CollectiveRow> rows;
  int failed = 0;                    // nccl-tests' "Out of bounds values": measurements with wrong elements
  double memcpy_gbs_per_rank = 0;    // at memcpy_bytes per rank (beyond the caches); 0 when not measured
  // At each size of the run below that one, where the caches make copies faster: the memcpy
  // limit of those sizes' rows.
  std::map<size_t, double> memcpy_gbs_by_size;
};

// Validates `o` (throws dpx::UsageError naming the flag), measures, prints the table to `out`
// and writes the CSV. Wrong results are reported, not thrown: the caller decides the exit code.
// With `processes` (an MPI launch, o.backend "mpi") every process is one rank of the benchmark,
// and rank 0 alone prints, writes and returns the rows.
CollectiveReport run_collective(const CollectiveOptions& o, std::ostream& out, ProcessGroup* processes = nullptr);
// One line per size: the out-of-place busbw of each of `columns` (column_of names a row's), "-"
// where it has none, `width` characters a column, under "# busbw (GB/s), out of place, <title>".
void print_busbw_side_by_side(std::ostream& out, std::string_view title, const std::vector<std::string>& columns,
                              const std::vector<CollectiveRow>& rows,
                              const std::function<std::string(const CollectiveRow&)>& column_of, int width);
// The algorithms `o.algo` names ("all": those of dpx's five that apply to the collective, and
// the library's with --backend mpi).
std::vector<Algorithm> selected_algorithms(const CollectiveOptions& o);
// Throws dpx::UsageError for any bad flag, before anything runs.
void validate(const CollectiveOptions& o);

// "1024", "1K", "64M", "1G", "0.5M" (K = 1024, as nccl-tests); throws dpx::UsageError.
size_t parse_bytes(std::string_view text, std::string_view flag = "size");
// The sizes nccl-tests would visit: min, then *factor (or +step) while <= max.
std::vector<size_t> size_steps(const CollectiveOptions& o);
// nccl-tests' busbw / algbw: 2(n-1)/n all_reduce; (n-1)/n all_gather, reduce_scatter,
// all_to_all, gather and scatter; 1 broadcast, reduce and sendrecv.
double bus_factor(Collective c, int ranks);
// nccl-tests' name of a dtype: float, double, half, bfloat16, int32, int64, uint8.
std::string_view nccl_type_name(DType t);
// nccl-tests or dpx spellings; throws dpx::UsageError listing both.
DType parse_bench_dtype(std::string_view name);

inline constexpr std::string_view kCollectiveCsvHeader =
    "collective,algo,backend,ranks,bytes,count,dtype,op,root,placement,time_us,algbw_gbs,busbw_gbs,wrong,nodes,"
    "limit_gbs,limit_source";
std::string collective_csv_row(const CollectiveRow& r);

}  // namespace dpx::parallel
