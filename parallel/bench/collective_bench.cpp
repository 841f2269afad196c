// `dpx collective`'s measurement loop and printing (see collective_bench.hpp). One run_ranks per
// algorithm; on every rank, for every size and placement: warm-up, a barrier, -n timed calls,
// the slowest rank's mean time, then (with -c 1) one call on fresh data checked element by element.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "core/atomic_file.hpp"
#include "core/clock.hpp"
#include "core/cuda/memory.hpp"
#include "core/error.hpp"
#include "parallel/bench/collective_bench.hpp"
#include "parallel/bench/collective_check.hpp"
#include "parallel/comm/nccl/nccl_backend.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"
#include "parallel/runtime/stall_report.hpp"
#include "parallel/comm/threads/threads_backend.hpp"
#include "parallel/runtime/launch.hpp"

namespace dpx::parallel {

namespace {

// Buffer sizes of one call, nccl-tests' getCollByteCount: the collectives with per-rank blocks
// (all_gather, reduce_scatter, all_to_all, gather, scatter) round the size down to a multiple of
// ranks * element size, and their count is per rank (per block).
struct Shape {
  size_t count = 0;                  // the count passed to the call
  size_t send_count = 0, recv_count = 0;
  size_t bytes = 0;                  // the size column: max(send, recv) bytes
};

Shape shape_of(Collective c, size_t size_bytes, DType dtype, int n) {
  const size_t es = dtype_size(dtype), elems = size_bytes / es;
  Shape s;
  switch (c) {
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all:
    case Collective::gather:
    case Collective::scatter: {
      s.count = elems / static_cast<size_t>(n);
      const size_t total = s.count * static_cast<size_t>(n);
      const bool gathers = c == Collective::all_gather || c == Collective::gather;
      const bool scatters = c == Collective::reduce_scatter || c == Collective::scatter;
      s.send_count = gathers ? s.count : total;
      s.recv_count = scatters ? s.count : total;
      break;
    }
    default: s.count = s.send_count = s.recv_count = elems;
  }
  s.bytes = std::max(s.send_count, s.recv_count) * es;
  return s;
}

struct Plan {
  Collective coll;
  DType dtype;
  ReduceOp op;       // what the call reduces with
  ReduceOp data_op;  // what the input data is made for (sum for collectives that do not reduce)
  bool reduces;
  std::vector<size_t> sizes;
  size_t buffer_bytes = 0;
};

// "4 KiB", "64 MiB", "1 GiB" where the size is a whole number of them, else "1000 B".
std::string size_label(size_t bytes) {
  for (auto [unit, suffix] : {std::pair{size_t{1} << 30, " GiB"}, {size_t{1} << 20, " MiB"}, {size_t{1} << 10, " KiB"}})
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  return std::to_string(bytes) + " B";
}

std::string time_str(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
  return buf;
}

void print_table_header(std::ostream& out, Algorithm algo) {
  char line[512];
  out << "#\n# Algorithm: " << algorithm_name(algo) << "\n";
  std::snprintf(line, sizeof(line), "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          ",
                "", "", "", "", "");
  out << line << "\n";
  std::snprintf(line, sizeof(line), "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size", "count",
                "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  out << line << "\n";
  std::snprintf(line, sizeof(line), "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  out << line << std::endl;
}

void print_row(std::ostream& out, const CollectiveRow& a, const CollectiveRow& b) {
  char line[512];
  int len = std::snprintf(line, sizeof(line), "%12zu  %12zu  %8s  %6s  %6i", a.bytes, a.count, a.dtype.c_str(),
                          a.op.c_str(), a.root);
  for (const CollectiveRow* r : {&a, &b}) {
    std::string wrong = r->wrong < 0 ? "N/A" : std::to_string(r->wrong);
    len += std::snprintf(line + len, sizeof(line) - static_cast<size_t>(len), "  %7s  %6.2f  %6.2f  %5s",
                         time_str(r->time_us).c_str(), r->algbw_gbs, r->busbw_gbs, wrong.c_str());
  }
  out << line << std::endl;  // flushed: long sweeps show progress row by row
}

// Where a call's buffers are on this rank, out of place (a, b) or in place (inside b), by
// nccl-tests' offsets: all_gather and gather send from block r of recv; reduce_scatter and
// scatter receive into block r of send; the others pass one buffer as both.
struct Buffers {
  void* send;
  void* recv;
};

Buffers placement(Collective c, const Shape& s, int r, size_t es, std::byte* a, std::byte* b, bool in_place) {
  if (!in_place) return {a, b};
  std::byte* block = b + static_cast<size_t>(r) * s.count * es;
  if (c == Collective::all_gather || c == Collective::gather) return {block, b};
  if (c == Collective::reduce_scatter || c == Collective::scatter) return {b, block};
  return {b, b};
}

// The element index at which rank q's data starts in a collective with per-rank blocks: the
// new patterns number the elements of the whole (gathered or scattered) buffer, as nccl-tests
// does (rank*count), so a block that lands in the wrong place is caught too.
size_t first_of(Collective c, size_t count, int q) {
  return c == Collective::sendrecv || c == Collective::gather ? static_cast<size_t>(q) * count : 0;
}

// Fills this rank's input and clears its output, so a call that does nothing is caught by the
// check (inputs are never 0). Outputs first: an in-place input lives inside the output.
// The four patterns clear the output whatever the placement (in place on rank 0, gather's
// input is the start of its output).
void prepare(const Plan& p, const Shape& s, int r, int root, void* send, void* recv) {
  const size_t es = dtype_size(p.dtype);
  const bool pattern = p.coll == Collective::sendrecv || p.coll == Collective::all_to_all ||
                       p.coll == Collective::gather || p.coll == Collective::scatter;
  if (recv != send || pattern) std::memset(recv, 0, s.recv_count * es);
  if ((p.coll == Collective::broadcast || p.coll == Collective::scatter) && r != root) {
    if (send == recv) std::memset(recv, 0, s.recv_count * es);
    return;  // only the root has an input
  }
  fill_input(send, s.send_count, first_of(p.coll, s.count, r), p.dtype, p.data_op, r);
}

int64_t wrong_elements(const Plan& p, const Shape& s, int n, int r, int root, const void* recv) {
  const size_t es = dtype_size(p.dtype);
  const auto* got = static_cast<const std::byte*>(recv);
  auto blocks_from_every_rank = [&](auto first) {  // block q came from rank q
    int64_t wrong = 0;
    for (int q = 0; q < n; ++q)
      wrong += count_wrong_input(got + static_cast<size_t>(q) * s.count * es, s.count, first(q), p.dtype, p.data_op, q);
    return wrong;
  };
  switch (p.coll) {
    case Collective::all_reduce: return count_wrong_reduced(recv, s.count, 0, p.dtype, p.op, n);
    case Collective::reduce: return r == root ? count_wrong_reduced(recv, s.count, 0, p.dtype, p.op, n) : 0;
    case Collective::broadcast: return count_wrong_input(recv, s.count, 0, p.dtype, p.data_op, root);
    case Collective::reduce_scatter: return count_wrong_reduced(recv, s.count, r * s.count, p.dtype, p.op, n);
    case Collective::all_gather: return blocks_from_every_rank([](int) { return size_t{0}; });
    case Collective::sendrecv: {
      const int left = (r - 1 + n) % n;
      return count_wrong_input(recv, s.count, first_of(p.coll, s.count, left), p.dtype, p.data_op, left);
    }
    // Block q of rank r's result is block r of rank q's input, elements [r*count, (r+1)*count).
    case Collective::all_to_all: return blocks_from_every_rank([&](int) { return r * s.count; });
    case Collective::gather:
      return r == root ? blocks_from_every_rank([&](int q) { return first_of(p.coll, s.count, q); }) : 0;
    case Collective::scatter: return count_wrong_input(recv, s.count, r * s.count, p.dtype, p.data_op, root);
    default: return 0;
  }
}

void call(Communicator& comm, const Plan& p, const Shape& s, int root, Algorithm algo, const void* send, void* recv) {
  switch (p.coll) {
    case Collective::all_reduce: return comm.all_reduce(send, recv, s.count, p.dtype, p.op, algo);
    case Collective::broadcast: return comm.broadcast(send, recv, s.count, p.dtype, root, algo);
    case Collective::reduce: return comm.reduce(send, recv, s.count, p.dtype, p.op, root, algo);
    case Collective::all_gather: return comm.all_gather(send, recv, s.count, p.dtype, algo);
    case Collective::reduce_scatter: return comm.reduce_scatter(send, recv, s.count, p.dtype, p.op, algo);
    case Collective::sendrecv: return comm.sendrecv(send, recv, s.count, p.dtype, algo);
    case Collective::all_to_all: return comm.all_to_all(send, recv, s.count, p.dtype, algo);
    case Collective::gather: return comm.gather(send, recv, s.count, p.dtype, root, algo);
    case Collective::scatter: return comm.scatter(send, recv, s.count, p.dtype, root, algo);
    default: fail("dpx collective: ", collective_name(p.coll), " is not benchmarked");
  }
}

// Everything rank 0 gathers while the ranks run; printed and written as it comes.
struct Sink {
  std::ostream& out;
  const CollectiveOptions& o;
  CollectiveReport& report;
  std::string csv;  // the whole file so far, rewritten atomically after every size
  int nodes = 1;    // distinct nodes of hier's layout
  double limit_gbs = 0;      // the busbw limit of the run (CollectiveRow)
  std::string limit_source = {};  // its source (CollectiveRow)

  // The limit of the rows of one size: one rank's memcpy bandwidth at that size where it was
  // measured (below the headline's size), else the run's.
  double limit_at(size_t size) const {
    const auto it = report.memcpy_gbs_by_size.find(size);
    return limit_source == "memcpy" && it != report.memcpy_gbs_by_size.end() ? it->second : limit_gbs;
  }
};

// A rank's two buffers: host memory, or (the nccl backend) device memory with host mirrors in
// which the data is made and checked, copied over before each timed loop and after each check.
struct RankMemory {
  Workspace wa, wb;
  std::byte* a = nullptr;  // host (the mirrors, on a GPU)
  std::byte* b = nullptr;
  Device device;
  std::byte* da = nullptr;  // device, or null
  std::byte* db = nullptr;
  size_t bytes = 0;

  RankMemory(Device dev, size_t buffer_bytes) : device(dev), bytes(std::max<size_t>(buffer_bytes, 64)) {
    a = wa.get(bytes);
    b = wb.get(bytes);
    std::memset(a, 0, bytes);  // first touch by the rank that uses the memory
    std::memset(b, 0, bytes);
    if (device.is_cuda()) {
      da = static_cast<std::byte*>(cuda::allocate(bytes, device.index));
      db = static_cast<std::byte*>(cuda::allocate(bytes, device.index));
    }
  }
  ~RankMemory() {
    if (da) cuda::release(da, bytes, device.index);
    if (db) cuda::release(db, bytes, device.index);
  }
  RankMemory(const RankMemory&) = delete;
  RankMemory& operator=(const RankMemory&) = delete;
  // The device address of a host mirror's byte (the host address itself without a device).
  void* on_device(const void* host) const {
    if (!da) return const_cast<void*>(host);
    const auto* h = static_cast<const std::byte*>(host);
    return h >= b && h < b + bytes ? db + (h - b) : da + (h - a);
  }
  void upload(const void* host, size_t n) const {
    if (da && n > 0) cuda::copy(on_device(host), device, host, Device::cpu(), n);
  }
  void download(void* host, size_t n) const {
    if (da && n > 0) cuda::copy(host, Device::cpu(), on_device(host), device, n);
  }
};

// `comm` carries the timed calls; `host` the barriers and the host-memory reductions of the
// times and #wrong (the same communicator, except on GPUs: the thread ranks' or MPI's).
// device: where the buffers live (a GPU for nccl and p2p).
void bench_rank(Communicator& host, Communicator& comm, Device device, const Plan& p, const CollectiveOptions& o,
                Algorithm algo, Sink& sink) {
  const int n = comm.size(), r = comm.rank(), root = is_rooted(p.coll) ? o.root : -1;
  const size_t es = dtype_size(p.dtype);
  RankMemory mem(device, p.buffer_bytes);
  for (size_t size : p.sizes) {
    const Shape s = shape_of(p.coll, size, p.dtype, n);
    CollectiveRow rows[2];
    for (int in_place = 0; in_place < 2; ++in_place) {
      // Named copies, not a structured binding: clang 14 (scripts/fuzz) captures no bindings in lambdas.
      const Buffers placed = placement(p.coll, s, r, es, mem.a, mem.b, in_place != 0);
      void* const send = placed.send;
      void* const recv = placed.recv;
      void* dsend = mem.on_device(send);
      void* drecv = mem.on_device(recv);
      const int call_root = root < 0 ? 0 : root;
      auto ready = [&] {  // fresh data, on the device too
        prepare(p, s, r, call_root, send, recv);
        mem.upload(recv, s.recv_count * es);
        mem.upload(send, s.send_count * es);
      };
      ready();
      for (int i = 0; i < o.warmup_iters; ++i) call(comm, p, s, call_root, algo, dsend, drecv);
      comm.synchronize();
      host.barrier();
      const double start = now_s();
      for (int i = 0; i < o.iters; ++i) call(comm, p, s, call_root, algo, dsend, drecv);
      comm.synchronize();  // a GPU's calls were only queued
      double mean_s = (now_s() - start) / o.iters, slowest_s = 0;
      host.all_reduce(&mean_s, &slowest_s, 1, DType::f64, ReduceOp::max, Algorithm::ring);
      int64_t wrong = -1;
      if (o.check) {
        ready();
        call(comm, p, s, call_root, algo, dsend, drecv);
        comm.synchronize();
        mem.download(recv, s.recv_count * es);
        int64_t mine = wrong_elements(p, s, n, r, call_root, recv);
        host.all_reduce(&mine, &wrong, 1, DType::i64, ReduceOp::sum, Algorithm::ring);
      }
      CollectiveRow& row = rows[in_place];
      row.collective = std::string(collective_name(p.coll));
      row.algo = std::string(algorithm_name(algo));
      row.backend = std::string(comm.backend());
      row.ranks = n;
      row.nodes = sink.nodes;
      row.bytes = s.bytes;
      row.count = s.count;
      row.dtype = std::string(nccl_type_name(p.dtype));
      row.op = p.reduces ? std::string(reduce_op_name(p.op)) : "none";
      row.root = root;
      row.in_place = in_place != 0;
      row.time_us = slowest_s * 1e6;
      row.algbw_gbs = slowest_s > 0 ? static_cast<double>(s.bytes) / 1e9 / slowest_s : 0;
      row.busbw_gbs = row.algbw_gbs * bus_factor(p.coll, n);
      row.wrong = wrong;
      row.limit_gbs = sink.limit_at(size);
      row.limit_source = sink.limit_source;
    }
    if (r == 0) {
      print_row(sink.out, rows[0], rows[1]);
      for (const CollectiveRow& row : rows) {
        sink.report.rows.push_back(row);
        if (row.wrong > 0) ++sink.report.failed;
        sink.csv += collective_csv_row(row) + "\n";
      }
      if (!sink.o.csv_path.empty()) write_file_atomic(sink.o.csv_path, sink.csv, "--csv");
    }
  }
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// Each timing copies at least this many bytes: a small buffer again and again, as a collective's
// calls copy theirs, so that the clock's resolution does not decide a small copy's bandwidth.
constexpr size_t kCopyBurst = size_t{4} << 20;

// This rank's copy bandwidth (GB/s) at each of `sizes` (bytes, none 0): the best of a few timings,
// all ranks starting together as the ranks of a collective do (a ceiling, so the copy least
// disturbed by the rest of the machine counts). A size that fits in the caches copies faster.
std::vector<double> copy_bandwidths(Communicator& comm, const std::vector<size_t>& sizes) {
  const size_t largest = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
  Workspace ws, wd;
  std::byte* src = ws.get(largest);
  std::byte* dst = wd.get(largest);
  std::memset(src, 1, largest);  // pages mapped before any timing
  std::memset(dst, 0, largest);
  std::vector<double> gbs;
  for (size_t bytes : sizes) {
    const size_t reps = std::max<size_t>(1, kCopyBurst / bytes);
    std::memcpy(dst, src, bytes);  // warm: TLB and caches in steady state
    double best_s = 1e30;
    for (int i = 0; i < 5; ++i) {
      comm.barrier();
      const double start = now_s();
      for (size_t k = 0; k < reps; ++k) {
        std::memcpy(dst, src, bytes);
        asm volatile("" : : "g"(dst) : "memory");  // every copy must happen although dst is never read
      }
      best_s = std::min(best_s, now_s() - start);
    }
    gbs.push_back(static_cast<double>(bytes) * static_cast<double>(reps) / 1e9 / best_s);
  }
  return gbs;
}

// Copy bandwidth of one rank (GB/s) at each of `sizes` (bytes per rank, none 0) while every rank
// of `comm` copies at once: their mean. On ranks that are processes, the ceiling for busbw.
std::vector<double> measure_memcpy_gbs(Communicator& comm, const std::vector<size_t>& sizes) {
  const std::vector<double> mine = copy_bandwidths(comm, sizes);
  std::vector<double> sum(sizes.size(), 0.0);
  comm.all_reduce(mine.data(), sum.data(), sizes.size(), DType::f64, ReduceOp::sum, Algorithm::ring);
  for (double& g : sum) g /= comm.size();
  return sum;
}

// The same while `ranks` thread ranks copy at once: the ceiling for busbw in the threads backend,
// where every byte sent is one copy by its receiver. Ranks beyond the CPU count take turns, so only
// min(ranks, cpus) copy at any moment; each rank then gets that share of the copying.
std::vector<double> measure_memcpy_gbs(int ranks, const std::vector<size_t>& sizes, bool pin_threads) {
  const int copiers = std::min(ranks, available_cpus());
  std::vector<double> per_rank;
  RankOptions ro;
  ro.pin_threads = pin_threads;
  run_ranks(copiers, [&](Communicator& comm) {
    std::vector<double> mean = measure_memcpy_gbs(comm, sizes);
    if (comm.rank() == 0) per_rank = std::move(mean);
  }, ro);
  for (double& g : per_rank) g *= static_cast<double>(copiers) / ranks;
  return per_rank;
}

// "{0-1} {2-3}": the ranks of each node, as hier groups them.
std::string node_groups(const std::vector<int>& node_of_rank) {
  std::vector<std::pair<int, std::vector<int>>> nodes;
  for (int r = 0; r < static_cast<int>(node_of_rank.size()); ++r) {
    auto it = std::find_if(nodes.begin(), nodes.end(), [&](const auto& n) { return n.first == node_of_rank[static_cast<size_t>(r)]; });
    if (it == nodes.end()) nodes.push_back({node_of_rank[static_cast<size_t>(r)], {r}});
    else it->second.push_back(r);
  }
  std::string s;
  for (const auto& [id, ranks] : nodes) s += (s.empty() ? "{" : " {") + rank_list(ranks) + "}";
  return s;
}

}  // namespace

void print_busbw_side_by_side(std::ostream& out, std::string_view title, const std::vector<std::string>& columns,
                              const std::vector<CollectiveRow>& rows,
                              const std::function<std::string(const CollectiveRow&)>& column_of, int width) {
  char cell[96];
  out << "#\n# busbw (GB/s), out of place, " << title << "\n# " << std::string(10, ' ') << "size";
  for (const std::string& c : columns) {
    std::snprintf(cell, sizeof cell, "  %*s", width, c.c_str());
    out << cell;
  }
  out << "\n";
  std::vector<size_t> sizes;
  for (const CollectiveRow& r : rows)
    if (std::find(sizes.begin(), sizes.end(), r.bytes) == sizes.end()) sizes.push_back(r.bytes);
  for (size_t bytes : sizes) {
    std::snprintf(cell, sizeof cell, "  %12zu", bytes);
    out << cell;
    for (const std::string& c : columns) {
      const auto it = std::find_if(rows.begin(), rows.end(), [&](const CollectiveRow& r) {
        return r.bytes == bytes && !r.in_place && column_of(r) == c;
      });
      if (it == rows.end()) std::snprintf(cell, sizeof cell, "  %*s", width, "-");
      else std::snprintf(cell, sizeof cell, "  %*.2f", width, it->busbw_gbs);
      out << cell;
    }
    out << "\n";
  }
  out << "#" << std::endl;
}

CollectiveReport run_collective(const CollectiveOptions& options, std::ostream& out, ProcessGroup* processes) {
  validate(options);
  CollectiveOptions o = options;
  // Ranks are the processes of an MPI job (--backend mpi, or nccl under mpirun), else threads.
  const bool nccl_ranks = o.backend == "nccl";  // ranks on GPUs through NCCL (threads, or MPI processes)
  const bool mpi = o.backend == "mpi" || (nccl_ranks && o.process_ranks > 0);
  if (mpi && (!processes || !processes->launched() || processes->size() != o.ranks))
    fail("dpx collective --backend ", o.backend, ": no MPI job of ", o.ranks, " processes to run on");
  if (nccl_ranks) check_nccl_gpus(mpi ? 0 : o.ranks);  // before the table: a machine without GPUs says so at once
  const LaunchInfo launch = mpi ? processes->info() : LaunchInfo{};
  const bool p2p = o.backend == "p2p";
  // p2p: rank r on GPU r mod (the --gpus list, or every visible GPU); validate() checked there is one.
  const std::vector<int> gpu_of_rank = p2p ? p2p_rank_devices(o.ranks, parse_gpu_list(o.gpus)) : std::vector<int>{};
  Plan p;
  p.coll = parse_collective(o.collective);
  p.dtype = parse_bench_dtype(o.datatype);
  p.op = parse_reduce_op(o.op);
  p.reduces = p.coll == Collective::all_reduce || p.coll == Collective::reduce || p.coll == Collective::reduce_scatter;
  p.data_op = p.reduces ? p.op : ReduceOp::sum;
  const std::vector<Algorithm> algos = selected_algorithms(o);
  // The ranks that share this machine's memory: all of them, or the MPI ranks of rank 0's node.
  int local_ranks = o.ranks;
  if (mpi) {
    local_ranks = 0;
    for (int node : launch.node_of_rank) local_ranks += node == launch.node_of_rank.front() ? 1 : 0;
  }

  // Each rank holds two buffers of the largest size; like nccl-tests, shrink -e to fit in memory.
  const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  const double limit = phys > 0 ? phys / 2 / (2.0 * local_ranks) : 1e300;
  bool reduced = false;
  if (static_cast<double>(o.max_bytes) > limit) {
    o.max_bytes = static_cast<size_t>(limit);
    o.min_bytes = std::min(o.min_bytes, o.max_bytes);
    reduced = true;
  }
  p.sizes = size_steps(o);
  for (size_t size : p.sizes) p.buffer_bytes = std::max(p.buffer_bytes, shape_of(p.coll, size, p.dtype, o.ranks).bytes);

  CollectiveReport report;
  Sink sink{out, o, report, std::string(kCollectiveCsvHeader) + "\n"};
  const bool rank0 = !mpi || processes->rank() == 0;
  // An unwritable path fails now; an existing file is replaced only once there is a row to write.
  if (!o.csv_path.empty() && rank0) check_writable_parent(o.csv_path, "--csv");

  out << "# dpx collective: " << collective_name(p.coll) << ", backend " << o.backend << ", " << o.ranks << " ranks ("
      << (mpi ? detail::concat("MPI processes on ", launch.nodes, " node", launch.nodes > 1 ? "s" : "", "; ",
                               launch.library, ", ", launch.thread_level)
              : std::string(p2p ? "threads of one process, each on a GPU" : "threads of one process"))
      << ")\n";
  out << "# nThread " << (nccl_ranks ? 1 : o.ranks) << " nGpus " << (nccl_ranks ? (mpi ? 1 : o.ranks) : p2p ? 1 : 0) << " minBytes " << o.min_bytes << " maxBytes " << o.max_bytes << " step: "
      << (o.step_factor != 0 ? o.step_factor : o.step_bytes) << (o.step_factor != 0 ? "(factor)" : "(bytes)")
      << " warmup iters: " << o.warmup_iters << " iters: " << o.iters << " validation: " << o.check << "\n";
  if (reduced) out << "#\n# Reducing maxBytes to " << o.max_bytes << " due to memory limitation\n";
  out << "#\n# Using devices\n";
  const int cpus = available_cpus();
  const std::string host = host_name();
  // The GPU of each rank: thread rank r drives cuda:r; a process its local rank's GPU.
  auto gpu_of = [&](int r) {
    return mpi ? nccl_device_for_local_rank(launch.local_rank[static_cast<size_t>(r)], cuda::device_count()) : r;
  };
  for (int r = 0; r < o.ranks; ++r) {
    char line[256];
    if (p2p)
      std::snprintf(line, sizeof(line), "#  Rank %2d Group  0 Pid %6d on %10s device cuda:%d (thread; buffers on the GPU)\n",
                    r, static_cast<int>(getpid()), host.c_str(), gpu_of_rank[static_cast<size_t>(r)]);
    else if (nccl_ranks)
      std::snprintf(line, sizeof(line), "#  Rank %2d Group  0 Pid %6d on %10s device cuda:%d (%s)\n", r,
                    mpi ? launch.pids[static_cast<size_t>(r)] : static_cast<int>(getpid()),
                    mpi ? launch.hosts[static_cast<size_t>(r)].c_str() : host.c_str(), gpu_of(r),
                    mpi ? "process" : "thread of one process");
    else if (mpi)
      std::snprintf(line, sizeof(line), "#  Rank %2d Group  0 Pid %6d on %10s device cpu (process, %s)\n", r,
                    launch.pids[static_cast<size_t>(r)], launch.hosts[static_cast<size_t>(r)].c_str(),
                    launch.bound ? "bound by the launcher" : "not bound");
    else
      std::snprintf(line, sizeof(line), "#  Rank %2d Group  0 Pid %6d on %10s device cpu (%s)\n", r,
                    static_cast<int>(getpid()), host.c_str(),
                    o.pin_threads ? ("pinned to the CPU #" + std::to_string(r % cpus) + " of " + std::to_string(cpus)).c_str()
                                  : "thread, not pinned");
    out << line;
  }
  if (nccl_ranks) out << "#\n# NCCL " << nccl_version() << ": non-blocking communicators, calls queued on each GPU's stream\n";
  // hier's nodes: --ranks-per-node, else the real ones (one, for thread ranks).
  std::vector<int> layout;
  for (int r = 0; r < o.ranks; ++r)
    layout.push_back(o.ranks_per_node > 0 ? r / o.ranks_per_node : mpi ? launch.node_of_rank[static_cast<size_t>(r)] : 0);
  if (mpi) processes->world().set_node_layout(layout);
  sink.nodes = static_cast<int>(std::set<int>(layout.begin(), layout.end()).size());
  if (std::find(algos.begin(), algos.end(), Algorithm::hier) != algos.end())
    out << "#\n# hier's nodes: " << node_groups(layout) << (o.ranks_per_node > 0 ? " (--ranks-per-node)" : "") << "\n";
  if (o.memcpy_bytes > 0 && !nccl_ranks && !p2p) {  // a host copy says nothing of the GPUs' links
    const double cap = phys > 0 ? phys / 8 / std::min(local_ranks, cpus) : 1e12;  // two buffers per copier
    const size_t bytes = std::min<size_t>(o.memcpy_bytes, static_cast<size_t>(std::min(cap, 1e12)));
    // The headline size first, then every size of the run below it (a larger one copies as fast;
    // size_steps' sizes grow strictly, so none repeats).
    std::vector<size_t> sizes = {bytes};
    for (size_t size : p.sizes)
      if (size > 0 && size < bytes) sizes.push_back(size);
    const std::vector<double> gbs =
        mpi ? measure_memcpy_gbs(processes->world(), sizes) : measure_memcpy_gbs(o.ranks, sizes, o.pin_threads);
    report.memcpy_gbs_per_rank = gbs[0];
    for (size_t i = 1; i < sizes.size(); ++i) report.memcpy_gbs_by_size[sizes[i]] = gbs[i];
    char line[256];
    const int at_once = mpi ? o.ranks : std::min(o.ranks, cpus);  // processes copy at once, threads take turns
    std::snprintf(line, sizeof(line), "#\n# memcpy bandwidth: %.2f GB/s per rank, %.2f GB/s in all (%d ranks copying %s each, %d at a time)\n",
                  report.memcpy_gbs_per_rank, report.memcpy_gbs_per_rank * o.ranks, o.ranks, size_label(bytes).c_str(), at_once);
    out << line;
    if (!report.memcpy_gbs_by_size.empty()) {
      out << "# and per rank at the smaller sizes of this run (GB/s; caches make them faster):";
      int k = 0;
      for (const auto& [size, g] : report.memcpy_gbs_by_size) {
        std::snprintf(line, sizeof(line), "%s %s %.2f", k++ % 6 == 0 ? "\n#  " : ",", size_label(size).c_str(), g);
        out << line;
      }
      out << "\n";
    }
    out << "# The busbw limit between ranks on one node: the receiver copies every byte sent (shared memory), so\n"
        << "# busbw, the bytes one rank sends per second, cannot exceed one rank's memcpy bandwidth at that size.\n";
  }
  const NetSim net = parse_net_sim(o.net_sim, "--net-sim");
  if (net.enabled()) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "# net-sim: %s (--net-sim): every exchange waits latency + bytes / rate more; busbw cannot pass\n"
                  "# %.3f GB/s.\n",
                  net.str().c_str(), net.bytes_per_s / 1e9);
    out << line;
  }
  if (o.link_gbps > 0) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "# link: %.3f Gbit/s = %.3f GB/s each way (--link-gbps): the busbw limit when every rank's traffic\n"
                  "# crosses one such link (one rank per node).\n",
                  o.link_gbps, o.link_gbps / 8);
    out << line;
  }
  // The one limit the CSV records (dpx plot draws it): the simulated network, else the link,
  // else, with every rank on one node, one rank's memcpy bandwidth.
  if (net.enabled()) {
    sink.limit_gbs = net.bytes_per_s / 1e9;
    sink.limit_source = "net-sim";
  } else if (o.link_gbps > 0) {
    sink.limit_gbs = o.link_gbps / 8;
    sink.limit_source = "link";
  } else if (report.memcpy_gbs_per_rank > 0 && sink.nodes == 1) {
    sink.limit_gbs = report.memcpy_gbs_per_rank;
    sink.limit_source = "memcpy";
  }
  out.flush();

  LaunchSpec spec;
  spec.backend = parse_choice(kBackends, o.backend, "--backend", "backend");
  spec.ranks = o.ranks;
  spec.device = Device::cpu();
  for (int r = 0; r < o.ranks && !mpi; ++r)  // thread ranks on GPUs: p2p's list, NCCL's cuda:0 to cuda:k-1
    if (p2p || nccl_ranks) spec.gpus.push_back(p2p ? gpu_of_rank[static_cast<size_t>(r)] : r);
  spec.options.pin_threads = o.pin_threads;
  spec.options.timeout_s = o.comm_timeout_s;
  spec.options.ranks_per_node = o.ranks_per_node;
  spec.options.net_sim = net;
  spec.processes = mpi ? &processes->world() : nullptr;
  spec.launch = &launch;
  for (Algorithm algo : algos) {
    print_table_header(out, algo);
    const size_t first_row = report.rows.size();
    const int failed_before = report.failed;
    launch_ranks(spec, [&](RankSetup& r) { bench_rank(*r.host, *r.data, r.device, p, o, algo, sink); });
    double bw = 0;
    for (size_t i = first_row; i < report.rows.size(); ++i) bw += report.rows[i].busbw_gbs;
    const size_t rows = report.rows.size() - first_row;
    const int failed = report.failed - failed_before;
    char line[128];
    std::snprintf(line, sizeof(line), "# Avg bus bandwidth    : %g \n", rows ? bw / static_cast<double>(rows) : 0.0);
    out << "# Out of bounds values : " << failed << (failed ? " FAILED" : " OK") << "\n" << line << "#" << std::endl;
  }
  if (algos.size() > 1) {
    std::vector<std::string> columns;
    for (Algorithm a : algos) columns.emplace_back(algorithm_name(a));
    print_busbw_side_by_side(out, "side by side", columns, report.rows, [](const CollectiveRow& r) { return r.algo; }, 8);
  }
  return report;
}

}  // namespace dpx::parallel
