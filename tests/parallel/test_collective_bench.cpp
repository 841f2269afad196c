// `dpx collective`'s engine, called as a library: size parsing and steps, the checks on bad
// input, the nccl-tests table and bandwidth definitions, the CSV, and the #wrong check itself.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "parallel/bench/collective_bench.hpp"
#include "parallel/bench/collective_check.hpp"
#include "test_collective_util.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using namespace dpx;
using namespace dpx::parallel;

namespace {

CollectiveOptions quick() {
  CollectiveOptions o;
  o.ranks = 3;
  o.min_bytes = 1024;
  o.max_bytes = 16 * 1024;
  o.step_factor = 4;
  o.iters = 2;
  o.warmup_iters = 1;
  o.memcpy_bytes = 1 << 20;
  return o;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("sizes parse with nccl-tests' K/M/G suffixes and step as nccl-tests steps") {
  CHECK(parse_bytes("1024") == 1024);
  CHECK(parse_bytes("1K") == 1024);
  CHECK(parse_bytes("64M") == 64u << 20);
  CHECK(parse_bytes("1g") == 1u << 30);
  CHECK(parse_bytes("0.5KB") == 512);
  for (const char* bad : {"", "K", "12Q", "-1", "1KK", "nan"}) CHECK_THROWS_AS(parse_bytes(bad, "-b"), UsageError);
  CHECK_THROWS_WITH(parse_bytes("12Q", "-b/--minbytes"), doctest::Contains("-b/--minbytes"));

  CollectiveOptions o;
  o.min_bytes = 1024;
  o.max_bytes = 64u << 20;
  o.step_factor = 4;
  std::vector<size_t> sizes = size_steps(o);
  REQUIRE(sizes.size() == 9);
  CHECK(sizes.front() == 1024);
  CHECK(sizes.back() == 64u << 20);
  o.step_factor = 0;
  o.min_bytes = 0;
  o.max_bytes = 10;
  o.step_bytes = 4;
  CHECK(size_steps(o) == std::vector<size_t>{0, 4, 8});
}

TEST_CASE("bad flags are usage errors that name the flag") {
  struct Case {
    void (*change)(CollectiveOptions&);
    const char* needle;
  };
  const Case cases[] = {
      {[](CollectiveOptions& o) { o.op = "mulsum"; }, "-o/--op: unknown reduction op 'mulsum'"},
      {[](CollectiveOptions& o) { o.datatype = "int8"; }, "-d/--datatype: unknown or unsupported type 'int8'"},
      {[](CollectiveOptions& o) { o.algo = "hierarchical"; }, "--algo: unknown algorithm"},
      {[](CollectiveOptions& o) { o.backend = "gloo"; }, "--backend: unknown backend 'gloo'"},
      {[](CollectiveOptions& o) { o.backend = "nccl"; },  // ring is dpx's; nccl runs NCCL's own (or is not built)
       kNcclBuilt ? "--algo ring with --backend nccl: NCCL chooses its own algorithm" : "--backend nccl: not built"},
      {[](CollectiveOptions& o) { o.algo = "nccl"; },
       kNcclBuilt ? "--algo nccl is NCCL's own collectives: it needs --backend nccl" : "algorithm 'nccl' (NCCL's own; "
                                                                                      "--backend nccl"},
      {[](CollectiveOptions& o) { o.backend = "nccl"; o.algo = "nccl"; o.net_sim = "1GB,1us"; },
       kNcclBuilt ? "--net-sim shapes the exchanges of dpx's own algorithms" : "--backend nccl: not built"},
      {[](CollectiveOptions& o) { o.backend = "mpi"; }, "--backend mpi: "},  // not under mpirun (or not built)
      {[](CollectiveOptions& o) { o.algo = "mpi"; },
       kMpiBuilt ? "--algo mpi is the MPI library's own collectives" : "algorithm 'mpi' (the MPI library's own; "
                                                                       "--backend mpi"},
      {[](CollectiveOptions& o) { o.ranks_per_node = -1; }, "--ranks-per-node: -1"},
      {[](CollectiveOptions& o) { o.comm_timeout_s = 0; }, "--comm-timeout: 0"},
      {[](CollectiveOptions& o) { o.link_gbps = -1; }, "--link-gbps: -1"},
      {[](CollectiveOptions& o) { o.collective = "alltoone"; }, "-t/--collective: unknown collective"},
      {[](CollectiveOptions& o) { o.collective = "gather"; o.algo = "ring"; },
       "--algo ring does not apply to -t gather: use tree, naive"},
      {[](CollectiveOptions& o) { o.collective = "alltoall"; o.algo = "hier"; },
       "--algo hier does not apply to -t all_to_all: use ring"},
      {[](CollectiveOptions& o) { o.collective = "16"; }, "the number of ranks is --ranks"},
      {[](CollectiveOptions& o) { o.min_bytes = 2048; o.max_bytes = 1024; }, "is larger than -e/--maxbytes"},
      {[](CollectiveOptions& o) { o.step_factor = 1; }, "-f/--stepfactor: 1 would not grow"},
      {[](CollectiveOptions& o) { o.min_bytes = 0; }, "cannot grow a size of 0"},
      {[](CollectiveOptions& o) { o.step_factor = 0; o.step_bytes = 0; }, "-i/--stepbytes: 0"},
      {[](CollectiveOptions& o) { o.step_factor = 0; o.step_bytes = 1; o.max_bytes = 1 << 20; }, "more than 10000 sizes"},
      {[](CollectiveOptions& o) { o.ranks = 0; }, "--ranks: 0 is not"},
      {[](CollectiveOptions& o) { o.collective = "broadcast"; o.root = 3; }, "-r/--root: 3 is not a rank"},
      {[](CollectiveOptions& o) { o.collective = "scatter"; o.algo = "tree"; o.root = -1; }, "-r/--root: -1 is not a rank"},
      {[](CollectiveOptions& o) { o.iters = 0; }, "-n/--iters"},
      {[](CollectiveOptions& o) { o.warmup_iters = -1; }, "-w/--warmup_iters"},
      {[](CollectiveOptions& o) { o.check = 2; }, "-c/--check"},
  };
  for (const Case& c : cases) {
    CollectiveOptions o = quick();
    c.change(o);
    CAPTURE(c.needle);
    CHECK_THROWS_WITH_AS(validate(o), doctest::Contains(c.needle), UsageError);
  }
  CollectiveOptions o = quick();
  o.root = 7;  // ignored by collectives without a root, as in nccl-tests
  CHECK_NOTHROW(validate(o));
}

TEST_CASE("the table has nccl-tests' columns and closing lines; busbw follows nccl-tests' factors") {
  testing::Watchdog dog(30, "collective table");
  const fs::path csv = fs::temp_directory_path() / ("dpx_collective_" + std::to_string(::getpid()) + ".csv");
  CollectiveOptions o = quick();
  o.csv_path = csv.string();
  std::ostringstream out;
  CollectiveReport rep = run_collective(o, out);
  const std::string text = out.str();
  CAPTURE(text);
  CHECK(text.find("#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
                  "   algbw   busbw #wrong") != std::string::npos);
  CHECK(text.find("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)") != std::string::npos);
  CHECK(text.find("# nThread 3 nGpus 0 minBytes 1024 maxBytes 16384 step: 4(factor) warmup iters: 1 iters: 2") !=
        std::string::npos);
  CHECK(text.find("# Out of bounds values : 0 OK") != std::string::npos);
  CHECK(text.find("# Avg bus bandwidth    : ") != std::string::npos);
  CHECK(text.find("# memcpy bandwidth: ") != std::string::npos);
  CHECK(count_of(text, "#  Rank ") == 3);
  // One row per size: 1K, 4K, 16K, each with an out-of-place and an in-place half.
  std::vector<std::string> rows;
  for (const std::string& l : lines_of(text))
    if (!l.empty() && l[0] != '#') rows.push_back(l);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].rfind("        1024           256     float     sum      -1", 0) == 0);
  REQUIRE(rep.rows.size() == 6);
  CHECK(rep.failed == 0);
  CHECK(rep.memcpy_gbs_per_rank > 0);
  for (const CollectiveRow& r : rep.rows) {
    CHECK(r.wrong == 0);
    CHECK(r.time_us > 0);
    CHECK(r.algbw_gbs == doctest::Approx(r.bytes / 1e9 / (r.time_us * 1e-6)));
    CHECK(r.busbw_gbs == doctest::Approx(r.algbw_gbs * 2.0 * 2 / 3));  // all_reduce: 2(n-1)/n
  }
  CHECK(rep.rows[0].in_place == false);
  CHECK(rep.rows[1].in_place == true);

  std::vector<std::string> lines = lines_of(dpx::testing::file_text(csv));
  REQUIRE(lines.size() == 7);
  CHECK(lines[0] ==
        "collective,algo,backend,ranks,bytes,count,dtype,op,root,placement,time_us,algbw_gbs,busbw_gbs,wrong,nodes,"
        "limit_gbs,limit_source");
  CHECK(lines[1].rfind("all_reduce,ring,threads,3,1024,256,float,sum,-1,out,", 0) == 0);
  CHECK(lines[2].rfind("all_reduce,ring,threads,3,1024,256,float,sum,-1,in,", 0) == 0);
  for (const std::string& l : lines) CHECK(count_of(l, ",") == 16);
  // #wrong (checked), one node (thread ranks), and the limit: the memcpy bandwidth measured first,
  // at each size of the run (all below the headline's 1 MiB), which the caches make faster.
  CHECK(lines[6].find(",0,1,") != std::string::npos);
  CHECK(lines[6].substr(lines[6].size() - 7) == ",memcpy");
  CHECK(rep.memcpy_gbs_per_rank > 0);
  CHECK(text.find("# and per rank at the smaller sizes of this run (GB/s; caches make them faster):\n#   1 KiB ") !=
        std::string::npos);
  REQUIRE(rep.memcpy_gbs_by_size.size() == 3);
  for (const CollectiveRow& r : rep.rows) {
    CHECK(r.limit_source == "memcpy");
    REQUIRE(rep.memcpy_gbs_by_size.count(r.bytes) == 1);
    CHECK(r.limit_gbs == rep.memcpy_gbs_by_size.at(r.bytes));
    CHECK(r.limit_gbs > 0);
  }
  fs::remove(csv);
}

TEST_CASE("sizes from the memcpy headline's up take its limit; smaller ones their own") {
  testing::Watchdog dog(30, "memcpy limits");
  CollectiveOptions o = quick();  // 1K, 4K, 16K
  o.memcpy_bytes = 4096;
  std::ostringstream out;
  const CollectiveReport rep = run_collective(o, out);
  CAPTURE(out.str());
  CHECK(out.str().find("(3 ranks copying 4 KiB each, ") != std::string::npos);
  REQUIRE(rep.memcpy_gbs_by_size.size() == 1);
  REQUIRE(rep.memcpy_gbs_by_size.count(1024) == 1);
  REQUIRE(rep.rows.size() == 6);
  for (const CollectiveRow& r : rep.rows)
    CHECK(r.limit_gbs == (r.bytes < 4096 ? rep.memcpy_gbs_by_size.at(1024) : rep.memcpy_gbs_per_rank));
}

TEST_CASE("--algo all prints one table per algorithm and busbw side by side; sizes round like nccl-tests") {
  testing::Watchdog dog(30, "algo all");
  for (const char* coll : {"all_gather", "reduce_scatter"}) {
    CollectiveOptions o = quick();
    o.collective = coll;
    o.algo = "all";
    o.min_bytes = o.max_bytes = 100;  // 25 floats: 8 per rank on 3 ranks, 96 bytes in all
    o.memcpy_bytes = 0;
    std::ostringstream out;
    CollectiveReport rep = run_collective(o, out);
    CHECK(count_of(out.str(), "# Algorithm: ") == kAlgorithms.size());  // ring, tree, naive, rhd, hier
    CHECK(count_of(out.str(), "# Out of bounds values : 0 OK") == kAlgorithms.size());
    CHECK(out.str().find("memcpy") == std::string::npos);
    CHECK(out.str().find("# hier's nodes: {0-2}") != std::string::npos);
    const size_t table = out.str().find("# busbw (GB/s), out of place, side by side");
    REQUIRE(table != std::string::npos);
    CHECK(out.str().find("ring      tree     naive       rhd      hier", table) != std::string::npos);
    CHECK(out.str().find("            96", table) != std::string::npos);
    REQUIRE(rep.rows.size() == 2 * kAlgorithms.size());
    for (const CollectiveRow& r : rep.rows) {
      CHECK(r.bytes == 96);
      CHECK(r.count == 8);
      CHECK(r.wrong == 0);
      CHECK(r.busbw_gbs == doctest::Approx(r.algbw_gbs * 2 / 3));  // (n-1)/n
    }
    CHECK(rep.rows[0].op == (std::string(coll) == "all_gather" ? "none" : "sum"));
  }
}

TEST_CASE("sendrecv, all_to_all, gather, scatter: the algorithms that apply, nccl-tests' sizes and busbw, 0 wrong") {
  testing::Watchdog dog(30, "patterns");
  struct Pattern {
    const char* name;
    std::vector<std::string> algos;
    double bus_factor;  // on 3 ranks
    size_t bytes, count;  // of -b 100 (25 floats)
    int root;
  };
  const Pattern patterns[] = {
      {"sendrecv", {"ring"}, 1.0, 100, 25, -1},         // count: the whole buffer
      {"alltoall", {"ring"}, 2.0 / 3, 96, 8, -1},        // count: per block, 8 to each of 3 ranks
      {"gather", {"tree", "naive", "rhd"}, 2.0 / 3, 96, 8, 1},
      {"scatter", {"tree", "naive", "rhd"}, 2.0 / 3, 96, 8, 1},
  };
  for (const Pattern& pat : patterns) {
    CAPTURE(pat.name);
    CollectiveOptions o = quick();
    o.collective = pat.name;
    o.algo = "all";
    o.root = 1;
    o.min_bytes = o.max_bytes = 100;
    o.memcpy_bytes = 0;
    std::ostringstream out;
    CollectiveReport rep = run_collective(o, out);
    CAPTURE(out.str());
    CHECK(count_of(out.str(), "# Algorithm: ") == pat.algos.size());
    CHECK(count_of(out.str(), "# Out of bounds values : 0 OK") == pat.algos.size());
    REQUIRE(rep.rows.size() == 2 * pat.algos.size());
    for (size_t i = 0; i < rep.rows.size(); ++i) {
      const CollectiveRow& r = rep.rows[i];
      CHECK(r.algo == pat.algos[i / 2]);
      CHECK(r.collective == collective_name(parse_collective(pat.name)));
      CHECK(r.bytes == pat.bytes);
      CHECK(r.count == pat.count);
      CHECK(r.root == pat.root);
      CHECK(r.op == "none");
      CHECK(r.nodes == 1);
      CHECK(r.wrong == 0);  // in place too: dpx defines it (MPI's in-place semantics)
      CHECK(r.busbw_gbs == doctest::Approx(r.algbw_gbs * pat.bus_factor));
    }
  }
  CHECK(bus_factor(Collective::sendrecv, 8) == 1.0);
  for (Collective c : {Collective::all_to_all, Collective::gather, Collective::scatter})
    CHECK(bus_factor(c, 8) == doctest::Approx(7.0 / 8));
  // --ranks-per-node: the nodes column counts hier's nodes.
  CollectiveOptions o = quick();
  o.ranks = 4;
  o.ranks_per_node = 3;
  o.min_bytes = o.max_bytes = 1024;
  o.memcpy_bytes = 0;
  std::ostringstream out;
  for (const CollectiveRow& r : run_collective(o, out).rows) CHECK(r.nodes == 2);
}

TEST_CASE("every collective, dtype and op checks out with zero wrong elements") {
  testing::Watchdog dog(30, "dtypes x ops");
  for (const char* coll : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "sendrecv",
                           "all_to_all", "gather", "scatter"}) {
    for (const char* type : {"float", "double", "half", "bfloat16", "int32", "int64", "uint8"}) {
      for (const char* op : {"sum", "prod", "max", "min", "avg"}) {
        CollectiveOptions o = quick();
        o.collective = coll;
        o.datatype = type;
        o.op = op;
        o.root = 2;
        o.ranks = 5;
        o.iters = 1;
        o.warmup_iters = 0;
        o.min_bytes = o.max_bytes = 4000;
        o.algo = std::string(op) == "sum"                                    ? "all"
                 : algorithm_applies(Algorithm::rhd, parse_collective(coll)) ? "rhd"
                                                                             : "ring";
        o.memcpy_bytes = 0;
        std::ostringstream out;
        CollectiveReport rep = run_collective(o, out);
        CAPTURE(out.str());
        CHECK(rep.failed == 0);
        for (const CollectiveRow& r : rep.rows) CHECK(r.wrong == 0);
        CHECK(rep.rows[0].root == (is_rooted(parse_collective(coll)) ? 2 : -1));
      }
    }
  }
}

TEST_CASE("the check counts wrong elements, so a broken collective would show in #wrong") {
  const int ranks = 4;
  std::vector<float> got(100);
  fill_input(got.data(), got.size(), 0, DType::f32, ReduceOp::max, 0);
  // One rank's input is not the max over four ranks everywhere...
  CHECK(count_wrong_reduced(got.data(), got.size(), 0, DType::f32, ReduceOp::max, ranks) > 0);
  // ...but over one rank it is; then a single corrupted element counts once.
  CHECK(count_wrong_reduced(got.data(), got.size(), 0, DType::f32, ReduceOp::max, 1) == 0);
  got[37] += 1;
  CHECK(count_wrong_reduced(got.data(), got.size(), 0, DType::f32, ReduceOp::max, 1) == 1);
  CHECK(count_wrong_input(got.data(), got.size(), 0, DType::f32, ReduceOp::max, 0) == 1);
  std::vector<float> zeros(50, 0.f);  // a call that wrote nothing: every element is wrong
  CHECK(count_wrong_input(zeros.data(), zeros.size(), 0, DType::f32, ReduceOp::sum, 0) == 50);
}

TEST_CASE("an unwritable --csv fails before anything is measured") {
  CollectiveOptions o = quick();
  o.csv_path = (fs::temp_directory_path() / "dpx-no-such-dir" / "x" / "out.csv").string();
  std::ostringstream out;
  CHECK_THROWS_AS(run_collective(o, out), Error);
  CHECK(out.str().empty());
}
