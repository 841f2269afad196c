// One multi-node run: dpx across two "nodes" that scripts/netcluster makes from network
// namespaces (own host names, TCP between them over 1 Gbit/s links). DDP across the nodes must
// reproduce one replica, and collective must see two nodes. Where this machine cannot make
// namespaces the script exits 77 with its reason, and so does this test (ctest: skipped).
#include <doctest/doctest.h>

#ifdef DPX_MPIEXEC
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/safetensors.hpp"
#include "mpi_run.hpp"
#include "weights_diff.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kNetcluster = std::string(DPX_SOURCE_DIR) + "/scripts/netcluster --quiet ";

// Runs the command on netcluster; a skipped run ends this test binary with 77 and the reason.
DpxResult on_cluster(const std::string& options, const std::string& command) {
#ifdef DPX_RANK_ASAN_OPTIONS  // the sanitized suite: ranks without the leak check (tests/CMakeLists.txt)
  const std::string rank_env = std::string("--mpirun-arg -x --mpirun-arg ") + DPX_RANK_ASAN_OPTIONS + " ";
#else
  const std::string rank_env;
#endif
  DpxResult r = run_command(kNetcluster + options + " " + rank_env + "-- " + command);
  if (r.code == 77) {
    std::printf("skipped: %s", r.output.c_str());
    std::fflush(stdout);
    std::_Exit(77);
  }
  return r;
}

}  // namespace

TEST_CASE("across two namespaced nodes: DDP reproduces one replica, and collective sees two nodes") {
  const dpx::testing::TempDir tmp("netcluster");
  const fs::path& d = tmp.path;
  const std::string train = std::string(DPX_BINARY) +
                            " train --model mlp --dataset synthetic --image-size 8 --channels 1 --synthetic-size 512 "
                            "--steps 6 --epochs 1 --batch-size 16 --seed 3 --threads 1 --workers 1 --warmup 0 --no-eval "
                            "--log-interval 1000 --save ";
  DpxResult single = run_command(train + (d / "single.safetensors").string());
  REQUIRE(single.code == 0);
  DpxResult r = on_cluster("--nodes 2 --link 1gbit",
                           train + (d / "cluster.safetensors").string() + " --out " + (d / "out").string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("| processes  | 2 MPI ranks on 2 nodes") != std::string::npos);
  const auto config = nlohmann::json::parse(file_text(d / "out" / "config.json"));
  CHECK(config["launch"]["nodes"] == 2);
  CHECK(config["launch"]["hosts"][0] != config["launch"]["hosts"][1]);
  for (const auto& u : config["launch"]["clock_uncertainty_s"]) CHECK(u.get<double>() < 0.01);
  CHECK(dpx::testing::weights_rel_diff(d / "single.safetensors", d / "cluster.safetensors") <= 1e-5);

  DpxResult c = on_cluster("--nodes 2 --ranks-per-node 2 --link 1gbit",
                           std::string(DPX_BINARY) + " collective --algo all -b 1K -e 64K -f 8 -n 2 -w 1 --link-gbps 1");
  CAPTURE(c.output);
  CHECK(c.code == 0);
  CHECK(c.output.find("4 ranks (MPI processes on 2 nodes") != std::string::npos);
  CHECK(c.output.find("# hier's nodes: {0, 1} {2, 3}") != std::string::npos);
  CHECK(c.output.find("# link: 1.000 Gbit/s") != std::string::npos);
  CHECK(c.output.find("FAILED") == std::string::npos);
}
#endif
