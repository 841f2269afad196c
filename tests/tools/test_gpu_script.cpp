// scripts/gpu and the GPU benchmark scripts on a machine without a GPU: they parse (bash -n), and
// scripts/gpu's GPU stages stop at once with a message saying why and what to do, instead of
// failing later in a build or a test. What they do on a GPU runs only there.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "run_dpx.hpp"

namespace {
const std::string kSource = DPX_SOURCE_DIR;
}

TEST_CASE("scripts/gpu and the GPU benchmark scripts are bash -n clean") {
  for (const char* script : {"scripts/gpu", "benchmarks/gpu-bench", "benchmarks/zoo_steps.sh"}) {
    CAPTURE(script);
    const DpxResult r = run_command("bash -n " + kSource + "/" + script);
    CAPTURE(r.output);
    CHECK(r.code == 0);
  }
}

TEST_CASE("scripts/gpu without a GPU exits 3 saying so; an unknown stage exits 2") {
  const auto dir = std::filesystem::temp_directory_path() / "dpx_gpu_script_test";
  std::filesystem::remove_all(dir);
  // NVIDIA_SMI=false: an nvidia-smi that lists no GPU, as on a machine without one.
  const std::string env = "NVIDIA_SMI=false OUT=" + (dir / "logs").string() + " DPX_BUILD_DIR=" + (dir / "build").string() + " ";
  for (const char* stages : {"", "test", "collective", "build test"}) {
    CAPTURE(stages);
    const DpxResult r = run_command(env + kSource + "/scripts/gpu " + stages);
    CAPTURE(r.output);
    CHECK(r.code == 3);
    CHECK(r.output.find("no GPU on this machine") != std::string::npos);
    CHECK(r.output.find("Run scripts/gpu on a GPU machine") != std::string::npos);
  }
  const DpxResult bad = run_command(env + kSource + "/scripts/gpu benchmark");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("unknown stage 'benchmark'") != std::string::npos);
  std::filesystem::remove_all(dir);
}
