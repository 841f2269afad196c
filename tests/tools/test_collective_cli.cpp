// `dpx collective` end to end: the binary prints nccl-tests' table, writes the CSV, exits 2 with
// a message naming the flag on bad input, and warns (but runs) with more ranks than CPUs.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_dpx.hpp"

namespace {

using Result = DpxResult;
Result dpx_collective(const std::string& args) { return run_dpx(args); }

const std::string kSmall = "collective -b 1K -e 4K -f 2 -n 2 -w 1 ";

}  // namespace

TEST_CASE("dpx collective prints the nccl-tests table and writes the CSV") {
  const auto csv = std::filesystem::temp_directory_path() / ("dpx_collective_cli_" + std::to_string(::getpid()) + ".csv");
  Result r = dpx_collective(kSmall + "--ranks 2 --algo all -t reduce -r 1 -d bfloat16 -o max --csv " + csv.string());
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("#       size         count      type   redop    root     time   algbw   busbw #wrong") !=
        std::string::npos);
  CHECK(r.output.find("        1024           512  bfloat16     max       1") != std::string::npos);
  CHECK(r.output.find("# Algorithm: rhd") != std::string::npos);
  CHECK(r.output.find("# Out of bounds values : 0 OK") != std::string::npos);
  std::ifstream f(csv);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  // header + algorithms (one table each: the registry's own, ring, tree, naive, rhd, hier) x sizes x placements
  size_t tables = 0;
  for (size_t at = r.output.find("# Algorithm: "); at != std::string::npos; at = r.output.find("# Algorithm: ", at + 1))
    ++tables;
  CHECK(tables >= 5);
  CHECK(lines.size() == 1 + tables * 3 * 2);
  CHECK(lines.at(1).rfind("reduce,ring,threads,2,1024,512,bfloat16,max,1,out,", 0) == 0);
  std::filesystem::remove(csv);
}

TEST_CASE("dpx collective: bad input exits 2 with a message naming the flag") {
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {"-o mulsum", "-o/--op: unknown reduction op 'mulsum'"},
      {"-d int8", "-d/--datatype: unknown or unsupported type 'int8'"},
      {"--algo hierarchical", "--algo: unknown algorithm 'hierarchical'"},
      {"--backend threads,gloo", "--backend: unknown backend 'gloo'"},
      {"--gpus 0", "--gpus: only with --backend p2p"},
      {"--backend gloo", "--backend: unknown backend 'gloo'"},
      {"-t alltoone", "-t/--collective: unknown collective 'alltoone'"},
      {"-t gather --algo ring", "--algo ring does not apply to -t gather: use tree, naive"},
      {"-t scatter --algo hier", "--algo hier does not apply to -t scatter: use tree, naive"},
      {"-t sendrecv --algo tree", "--algo tree does not apply to -t sendrecv: use ring"},
      {"-t alltoall --algo naive", "--algo naive does not apply to -t all_to_all: use ring"},
      {"-t gather -r 2", "-r/--root: 2 is not a rank"},
      {"-t 8", "the number of ranks is --ranks"},
      {"-b 2K -e 1K", "-b/--minbytes 2048 is larger than -e/--maxbytes 1024"},
      {"-b 12Q", "-b/--minbytes: '12Q' has an unknown unit"},
      {"-f 1", "-f/--stepfactor: 1 would not grow"},
      {"-f 2 -i 1K", "give one, not both"},
      {"--ranks 0", "--ranks: 0 is not"},
      {"-t broadcast -r 2", "-r/--root: 2 is not a rank"},
      {"-n 0", "-n/--iters"},
      {"-c 3", "-c/--check"},
  };
  for (const Case& c : cases) {
    Result r = dpx_collective("collective --ranks 2 -b 1K -e 1K " + c.args);
    CAPTURE(c.args);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("dpx: error: ") != std::string::npos);
    CHECK(r.output.find(c.needle) != std::string::npos);
  }
}

TEST_CASE("dpx collective --backend p2p without a GPU exits 2 saying why and what to do") {
  Result r = dpx_collective("collective --backend p2p --ranks 2 -b 1K -e 1K -n 1 -w 0");
  CAPTURE(r.output);
  if (r.code != 0) {  // 0 on a GPU machine
    CHECK(r.code == 2);
    CHECK(r.output.find("dpx: error: --backend p2p: ") != std::string::npos);
    const bool no_cuda = r.output.find("built without CUDA: rebuild with -DDPX_CUDA=ON") != std::string::npos;
    const bool no_gpu = r.output.find("it needs a GPU, and ") != std::string::npos &&
                        r.output.find("run it on a GPU machine, or use --backend threads") != std::string::npos;
    CHECK((no_cuda || no_gpu));
  }
}

TEST_CASE("dpx collective --backend threads,threads runs each and prints their busbw side by side") {
  const auto csv = std::filesystem::temp_directory_path() / "dpx_collective_backends.csv";
  Result r = dpx_collective("collective --backend threads,threads --ranks 2 -b 1K -e 4K -f 2 -n 2 -w 1 --csv " + csv.string());
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("backends side by side") != std::string::npos);
  CHECK(r.output.find("threads/ring") != std::string::npos);
  std::ifstream in(csv);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  CHECK(lines == 1 + 2 * 3 * 2);  // header; two runs of three sizes, out of place and in place
  std::filesystem::remove(csv);
}

TEST_CASE("dpx collective runs sendrecv, alltoall, gather and scatter with every algorithm that applies") {
  struct Pattern {
    std::string name;
    std::vector<std::string> algos;
  };
  const std::vector<Pattern> patterns = {{"sendrecv", {"ring"}},
                                         {"alltoall", {"ring"}},
                                         {"gather", {"tree", "naive", "rhd"}},
                                         {"scatter", {"tree", "naive", "rhd"}}};
  for (const Pattern& p : patterns) {
    Result r = dpx_collective(kSmall + "--ranks 3 -r 2 -t " + p.name + " --algo all");
    CAPTURE(p.name);
    CAPTURE(r.output);
    CHECK(r.code == 0);
    for (const std::string& algo : p.algos) CHECK(r.output.find("# Algorithm: " + algo + "\n") != std::string::npos);
    size_t tables = 0, ok = 0;
    for (size_t at = r.output.find("# Algorithm: "); at != std::string::npos; at = r.output.find("# Algorithm: ", at + 1))
      ++tables;
    for (size_t at = r.output.find("# Out of bounds values : 0 OK"); at != std::string::npos;
         at = r.output.find("# Out of bounds values : 0 OK", at + 1))
      ++ok;
    CHECK(tables == p.algos.size());
    CHECK(ok == p.algos.size());
  }
  // Without --algo, gather and scatter run tree (ring has no schedule for them).
  Result r = dpx_collective(kSmall + "--ranks 2 -t gather");
  CHECK(r.code == 0);
  CHECK(r.output.find("# Algorithm: tree\n") != std::string::npos);
  Result help = dpx_collective("collective --help");
  CHECK(help.output.find("sendrecv, all_to_all (alltoall), gather or scatter") != std::string::npos);
  CHECK(help.output.find("root rank of broadcast, reduce, gather and scatter") != std::string::npos);
}

TEST_CASE("dpx collective: more ranks than CPUs is a warning, and the run still checks out") {
  Result r = dpx_collective("collective --ranks 64 -b 1K -e 1K -n 1 -w 0 -t all_gather");
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("dpx: warning: 64 ranks on ") != std::string::npos);
  CHECK(r.output.find("# Out of bounds values : 0 OK") != std::string::npos);
}
