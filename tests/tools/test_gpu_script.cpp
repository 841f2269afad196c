// scripts/gpu and the GPU benchmark scripts on a machine without a GPU: they parse (bash -n), and
// scripts/gpu's GPU stages stop at once with a message saying why and what to do, instead of
// failing later in a build or a test. What they do on a GPU runs only there.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_dpx.hpp"
#include "tests/common/files.hpp"

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
  for (const char* stages : {"", "test", "collective", "graph", "build test"}) {
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

TEST_CASE("scripts/gpu --help prints its whole header comment, every variable included") {
  const DpxResult r = run_command(kSource + "/scripts/gpu --help");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  for (const char* name : {"Usage: scripts/gpu", "MORE_PROFILE", "NVIDIA_SMI", "can go in separate calls"})
    CHECK(r.output.find(name) != std::string::npos);
  CHECK(r.output.find("set -uo") == std::string::npos);  // not the code after it
}

TEST_CASE("scripts/gpu --dry-run prints the plan within 9 minutes, GPU or not; a bad option, budget scale or zoo list exits 2") {
  const DpxResult r = run_command("NVIDIA_SMI=false " + kSource + "/scripts/gpu --dry-run");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  for (const char* stage : {"build", "test", "profile", "bench", "ddp", "graph", "sanitize", "report"})
    CHECK(r.output.find(std::string("  ") + stage + " ") != std::string::npos);
  CHECK(r.output.find("collective") == std::string::npos);  // several GPUs only
  const auto at = r.output.find("  total ");
  REQUIRE(at != std::string::npos);
  const int total = std::stoi(r.output.substr(at + 8));
  CHECK(total > 0);
  CHECK(total <= 540);
  const DpxResult one = run_command("NVIDIA_SMI=false " + kSource + "/scripts/gpu --dry-run profile");
  CHECK(one.code == 0);
  CHECK(one.output.find("  build ") == std::string::npos);
  CHECK(one.output.find("  profile ") != std::string::npos);
  CHECK(run_command("NVIDIA_SMI=false " + kSource + "/scripts/gpu --fast").code == 2);
  const DpxResult scale = run_command("NVIDIA_SMI=false BUDGET_SCALE=abc " + kSource + "/scripts/gpu --dry-run");
  CHECK(scale.code == 2);
  CHECK(scale.output.find("BUDGET_SCALE") != std::string::npos);
  // The zoo test's model list reaches a command line: anything but names and commas is refused.
  const DpxResult zoo = run_command("NVIDIA_SMI=false ZOO_MODELS='vgg11;true' " + kSource + "/scripts/gpu --dry-run");
  CHECK(zoo.code == 2);
  CHECK(zoo.output.find("ZOO_MODELS") != std::string::npos);
  // So does the more stage's profile list: PRECISION=MODELS entries only.
  for (const char* entry : {"bf16", "int8=resnet50", "bf16=resnet50;true"}) {
    CAPTURE(entry);
    const DpxResult more =
        run_command("NVIDIA_SMI=false MORE_PROFILE='" + std::string(entry) + "' " + kSource + "/scripts/gpu --dry-run");
    CHECK(more.code == 2);
    CHECK(more.output.find("MORE_PROFILE entry") != std::string::npos);
  }
  CHECK(run_command("NVIDIA_SMI=false MORE_PROFILE='bf16=resnet50 tf32=vgg16,vgg11' " + kSource +
                    "/scripts/gpu --dry-run")
            .code == 0);
}

namespace {
// A stand-in for dpx in benchmarks/gpu-bench and scripts/gpu: `models` writes a model's forward
// GFLOPs; `bench` writes results.csv (and with --profile-shapes ops.csv) after each model, as dpx
// does, and exits 1 at a model of FAIL while it runs with others (a fault that leaves the CUDA
// context unusable for the models after it), or at one of FAIL_ALONE even alone, unless
// DPX_HALF_MAPS=0, or at one of FAIL_ALWAYS in any case. Each call's arguments are appended to CALLS.
constexpr const char* kFakeDpx = R"SH(#!/usr/bin/env bash
[[ -n ${CALLS:-} ]] && echo "$*" >>"$CALLS"
cmd=$1; shift
case $cmd in
  models) m=$1; shift
    while [[ $# -gt 0 ]]; do [[ $1 == --csv ]] && printf 'model,forward_gflops\n%s,1.5\n' "$m" >"$2"; shift; done ;;
  bench) models='' out='' profile=0
    while [[ $# -gt 0 ]]; do
      case $1 in --models) models=$2; shift ;; --out) out=$2; shift ;; --profile-shapes) profile=1 ;; esac
      shift
    done
    mkdir -p "$out"
    IFS=, read -r -a list <<<"$models"
    csv=model,mean_forward_s,mean_backward_s,mean_optimizer_s,batch_size,images_per_s,peak_device_allocated_bytes,peak_device_reserved_bytes
    ops=configuration,run,op,calls,total_ms,ms_per_step,percent_of_step,gflops,host_ms_per_step,kernels_per_step,shape
    for m in "${list[@]}"; do
      if [[ ,${FAIL:-}, == *,$m,* && ${#list[@]} -gt 1 ]] ||
         [[ ,${FAIL_ALONE:-}, == *,$m,* && ${DPX_HALF_MAPS:-1} != 0 ]] || [[ ,${FAIL_ALWAYS:-}, == *,$m,* ]]; then
        echo "dpx: error: $m: an illegal memory access"; exit 1
      fi
      csv+=$'\n'"$m,0.010,0.020,0.001,64,3200,1000000000,2000000000"
      echo "$csv" >"$out/results.csv"
      ops+=$'\n'"${m}_b64_none_cuda1,1,conv2d_forward,30,3.0,1.0,50.0,0,0.1,1,(64x3x224x224)"
      if [[ $profile == 1 ]]; then echo "$ops" >"$out/ops.csv"; fi
    done ;;
esac
exit 0
)SH";

}  // namespace

// gpu-bench on a GPU machine where one model's kernels fail: the models the shared dpx process
// measured keep their rows, the rest run again a process each, and in bf16 a model that fails
// alone too is measured with fp32 maps (DPX_HALF_MAPS=0), its row saying so. A failure is counted
// in the exit status; what it cost is said on stderr.
TEST_CASE("gpu-bench keeps the models a failing dpx process measured and runs the others a process each") {
  dpx::testing::TempDir dir("gpu_bench");
  const std::string fake = dir.file("dpx");
  dpx::testing::write_executable(fake, kFakeDpx);
  auto bench = [&](const std::string& env) {
    return run_command("DPX=" + fake + " PYTHON=false MODELS=a,b,c " + env + " " + kSource + "/benchmarks/gpu-bench");
  };
  // Each model's row: 10 + 20 + 1 ms of compute, a step of 64 / 3200 s, 1000 MB allocated.
  auto measured = [](const std::string& out, const std::string& model, const std::string& label) {
    return out.find("| " + model + " | " + label + " | 10.0 / 20.0 / 1.0 | 31.0 | 20.0 | - | - | - |") !=
           std::string::npos;
  };

  // Model names reach file names and command lines.
  for (const std::string bad : {"'a,../b'", "'a b'", "a,,b", "a,"}) {
    CAPTURE(bad);
    const DpxResult r =
        run_command("DPX=" + fake + " PYTHON=false MODELS=" + bad + " " + kSource + "/benchmarks/gpu-bench");
    CHECK(r.code == 2);
    CHECK(r.output.find("gpu-bench: MODELS must be comma-separated model names") != std::string::npos);
  }

  const DpxResult fine = bench("POINTS=bf16:search");
  CAPTURE(fine.output);
  CHECK(fine.code == 0);
  for (const char* m : {"a", "b", "c"}) CHECK(measured(fine.output, m, "bf16 | search"));
  CHECK(fine.output.find("process of its own") == std::string::npos);

  // b poisons the shared process: a keeps its row, b and c are measured alone.
  const DpxResult shared = bench("POINTS=tf32:search FAIL=b");
  CAPTURE(shared.output);
  CHECK(shared.code == 1);
  CHECK(shared.output.find("gpu-bench: dpx bench failed at tf32:search") != std::string::npos);
  CHECK(shared.output.find("b: an illegal memory access") != std::string::npos);
  for (const char* m : {"a", "b", "c"}) CHECK(measured(shared.output, m, "tf32 | search"));
  CHECK(shared.output.find("gpu-bench: a at") == std::string::npos);
  CHECK(shared.output.find("gpu-bench: b at tf32:search measured in a dpx process of its own") != std::string::npos);
  CHECK(shared.output.find("gpu-bench: c at tf32:search measured in a dpx process of its own") != std::string::npos);
  CHECK(shared.output.find("1000 | 2000 | - | - | - |") != std::string::npos);  // the memory table too

  // b fails alone too: in TF32 its row is empty, in bf16 it is measured with fp32 maps.
  const DpxResult alone = bench("POINTS='tf32:search bf16:search' FAIL=b FAIL_ALONE=b");
  CAPTURE(alone.output);
  CHECK(alone.code == 1);
  CHECK(alone.output.find("| b | tf32 | search | - | - | - |") != std::string::npos);
  CHECK(alone.output.find("gpu-bench: b at tf32:search failed in a dpx process of its own too") != std::string::npos);
  const std::string f32maps = "bf16 | search, dpx with fp32 maps (DPX_HALF_MAPS=0: it failed with half-precision maps)";
  CHECK(measured(alone.output, "b", f32maps));
  CHECK(alone.output.find("| b | " + f32maps + " | 1000 | 2000 |") != std::string::npos);
  CHECK(alone.output.find("gpu-bench: b at bf16:search measured with fp32 maps (DPX_HALF_MAPS=0)") !=
        std::string::npos);
  for (const char* m : {"a", "c"}) {
    CHECK(measured(alone.output, m, "tf32 | search"));
    CHECK(measured(alone.output, m, "bf16 | search"));
  }

  // b fails with fp32 maps too: its bf16 row is empty, and that is said.
  const DpxResult always = bench("POINTS=bf16:search FAIL_ALWAYS=b");
  CAPTURE(always.output);
  CHECK(always.code == 1);
  CHECK(always.output.find("| b | bf16 | search | - | - | - |") != std::string::npos);
  CHECK(always.output.find("gpu-bench: b at bf16:search failed with fp32 maps (DPX_HALF_MAPS=0) too") !=
        std::string::npos);
  CHECK(measured(always.output, "c", "bf16 | search"));
}

// scripts/gpu's profile and sanitize stages on a stand-in GPU machine: nvidia-smi, nvcc and
// compute-sanitizer are scripts that say what a one-GPU machine says, dpx is the stand-in above.
// The profile keeps what a failing dpx process profiled and profiles the rest a process each; the
// sanitize stage runs memcheck over a step of SANITIZE_MODELS in bf16 and then fp32, each said, a
// failed process's unfinished models again alone; the bench's failures reach gpu.log; and every
// stage after the build but the tests runs through to the report (a bash slip in a stage that only
// a lent GPU reaches would cost that run).
TEST_CASE("scripts/gpu's profile and sanitize stages on a stand-in GPU: a failing model costs only itself") {
  dpx::testing::TempDir dir("gpu_stages");
  const std::string bin = dir.file("bin"), build = dir.file("build"), logs = dir.file("logs");
  dpx::testing::write_executable(build + "/bin/dpx", kFakeDpx);
  std::ofstream(build + "/CMakeCache.txt") << "# configured\n";  // no configure stage
  auto tool = [&](const std::string& name, const std::string& body) {
    dpx::testing::write_executable(bin + "/" + name, "#!/usr/bin/env bash\n" + body);
  };
  tool("nvidia-smi",
       "if [[ $1 == -L ]]; then echo 'GPU 0: NVIDIA Stand-in (UUID: GPU-0)'; else echo 'NVIDIA Stand-in, 1 MiB, 0, 1 "
       "MHz'; fi\n");
  tool("nvcc", "echo 'Cuda compilation tools, release 13.0, V13.0.88'; echo 'Build cuda_13.0'\n");
  // memcheck's options come in pairs (--tool memcheck --error-exitcode 3), then the command.
  tool("compute-sanitizer",
       "while [[ $1 == --* ]]; do shift 2; done\n\"$@\"; rc=$?\necho '========= ERROR SUMMARY: 0 errors'\nexit $rc\n");
  const std::string env = "PATH=" + bin + ":$PATH NVIDIA_SMI=" + bin +
                          "/nvidia-smi PYTHON=false DPX_BUILD_DIR=" + build + " OUT=" + logs +
                          " CALLS=" + dir.file("calls") + " GPU_DEADLINE_S=0 PROFILE_MODELS=a,b,c ";

  const DpxResult r = run_command(env + "FAIL=b SANITIZE_MODELS=a,b,c BENCH_POINTS=tf32:search " + kSource +
                                  "/scripts/gpu profile bench sanitize");
  CAPTURE(r.output);
  const std::string gpu_log = dpx::testing::file_text(logs + "/gpu.log");
  CAPTURE(gpu_log);
  CHECK(r.code == 1);  // the failure is counted
  for (const char* precision : {"tf32", "bf16", "fp32"}) {
    CAPTURE(precision);
    CHECK(gpu_log.find(std::string("profile: dpx bench failed in ") + precision + " (exit 1") != std::string::npos);
    CHECK(gpu_log.find(std::string("profile: b (") + precision + ") profiled in a dpx process of its own") !=
          std::string::npos);
    CHECK(gpu_log.find(std::string("profile: c (") + precision + ") profiled in a dpx process of its own") !=
          std::string::npos);
    CHECK(gpu_log.find(std::string("profile: a (") + precision + ")") == std::string::npos);  // a was profiled
  }
  // Every model's rows, once each, under the precision and the cuDNN mode.
  const std::string profile = dpx::testing::file_text(logs + "/profile-dpx.csv");
  CAPTURE(profile);
  for (const char* precision : {"tf32", "bf16", "fp32"})
    for (const char* m : {"a", "b", "c"}) {
      const std::string row = std::string(precision) + ",search," + m + "_b64_none_cuda1,1,conv2d_forward,";
      const auto at = profile.find(row);
      CHECK(at != std::string::npos);
      CHECK(profile.find(row, at + 1) == std::string::npos);
    }
  // The bench's failure and what ran again, in gpu.log.
  CHECK(gpu_log.find("bench: dpx bench failed at tf32:search") != std::string::npos);
  CHECK(gpu_log.find("bench: b at tf32:search measured in a dpx process of its own") != std::string::npos);
  // memcheck over both precisions: the process that failed at b, then b and c alone, each said
  // with its summary (the stand-in's memcheck finds nothing; dpx's exit status is said).
  CHECK(gpu_log.find("compute-sanitizer memcheck: bf16 step 0 errors (exit 1); bf16 b 0 errors; bf16 c 0 errors; "
                     "fp32 step 0 errors (exit 1); fp32 b 0 errors; fp32 c 0 errors") != std::string::npos);
  const std::string calls = dpx::testing::file_text(dir.file("calls"));
  CAPTURE(calls);
  for (const char* precision : {"bf16", "fp32"})
    for (const char* models : {"a,b,c", "b", "c"})
      CHECK(calls.find(std::string("bench --models ") + models + " --devices cuda:0 --parallel none --batch-sizes 4 " +
                       "--image-size 64 --channels 3 --steps 1 --warmup 0 --dataset synthetic --precision " +
                       precision) != std::string::npos);

  // Every stage after the build but the tests, end to end (with a deadline, so that the more stage
  // runs: its bf16 profile of resnet50 and vgg16, its points), and the report: the bench's table
  // and memcheck's line.
  const DpxResult all = run_command(env + "SANITIZE_MODELS=a GPU_DEADLINE_S=100000 " + kSource +
                                    "/scripts/gpu profile bench ddp graph sanitize more report");
  CAPTURE(all.output);
  CHECK(all.code == 0);
  const std::string report = dpx::testing::file_text(logs + "/results.md");
  CAPTURE(report);
  CHECK(report.find("- compute-sanitizer memcheck: bf16 step 0 errors; fp32 step 0 errors") != std::string::npos);
  for (const char* row :
       {"| a | tf32 | search | 10.0 / 20.0 / 1.0 | 31.0 |", "| c | bf16 | search | 10.0 / 20.0 / 1.0 |"})
    CHECK(report.find(row) != std::string::npos);
  const std::string more_profile = dpx::testing::file_text(logs + "/profile-dpx.csv");
  CHECK(more_profile.find("bf16,search,vgg16_b64_none_cuda1,") != std::string::npos);
  CHECK(report.find("| efficientnet_b0 | tf32 | search, dpx --cuda-graph | 10.0 / 20.0 / 1.0 |") != std::string::npos);

  // A list that would reach a command line as something else is refused before anything runs.
  for (const char* var : {"PROFILE_MODELS='a;true'", "SANITIZE_MODELS='a b'", "PROFILE_MODELS=a,,b"}) {
    CAPTURE(var);
    const DpxResult bad = run_command(env + var + " " + kSource + "/scripts/gpu --dry-run");
    CHECK(bad.code == 2);
    CHECK(bad.output.find(std::string(var).substr(0, std::string(var).find('='))) != std::string::npos);
  }
}

TEST_CASE("the PyTorch peers of the GPU scripts parse, and compare_profiles.py ranks the committed H100 profile") {
  if (run_command("command -v python3").code != 0) {
    MESSAGE("no python3 on this machine: the Python peers are not checked (they run where PyTorch is)");
    return;
  }
  for (const char* script : {"benchmarks/pytorch/profile_step.py", "benchmarks/pytorch/train_step.py",
                             "benchmarks/gpu/compare_profiles.py"}) {
    CAPTURE(script);
    const DpxResult r = run_command("python3 -c \"import ast,sys; ast.parse(open(sys.argv[1]).read())\" " + kSource +
                                    "/" + script);
    CAPTURE(r.output);
    CHECK(r.code == 0);
  }
  // compare_profiles.py over a committed run's two CSVs: its output from squeezenet1_1's fp32 table on.
  auto squeezenet_table = [](const std::string& run) {
    const std::string dir = kSource + "/benchmarks/gpu/" + run + "/";
    const DpxResult cmp = run_command("python3 " + kSource + "/benchmarks/gpu/compare_profiles.py " + dir +
                                      "profile-dpx.csv " + dir + "profile-torch.csv");
    CAPTURE(cmp.output);
    REQUIRE(cmp.code == 0);
    const auto at = cmp.output.find("#### squeezenet1_1, fp32");
    REQUIRE(at != std::string::npos);
    return cmp.output.substr(at);
  };
  // The committed 2026-11-26 H100 profiles: squeezenet1_1 loses most in its convolutions' backward.
  const std::string run1 = squeezenet_table("2026-11-26-h100/run1");
  CHECK(run1.find("| **convolution backward** | 20.39 | 4.39 | +16.00 |") != std::string::npos);
  // Run 3 (2026-11-27) has host times on both sides: each kind's beside its GPU time, and the
  // divergence guard's wait for the GPU said apart (its profile-dpx.csv header had ten columns over
  // rows of twelve: the host column is read from the unnamed extras).
  const std::string run3 = squeezenet_table("2026-11-27-h100/run3");
  CHECK(run3.find("dpx 15.5 ms per step (1.6 of them waiting for the GPU in count_nonfinite), PyTorch 10.8") !=
        std::string::npos);
  CHECK(run3.find("| **convolution backward** | 7.56 | 4.43 | +3.14 | 8.22 | 2.09 |") != std::string::npos);
}

// Profiles with shapes (dpx bench --profile-shapes, profile_step.py --shapes): the kinds' table sums
// an op's shapes, and each model gets a table of its convolutions by input and weight shape.
TEST_CASE("compare_profiles.py sums an op's shapes and lists the convolutions by shape") {
  if (run_command("command -v python3").code != 0) {
    MESSAGE("no python3 on this machine: compare_profiles.py is not checked");
    return;
  }
  const dpx::testing::TempDir dir("compare_shapes");
  {
    std::ofstream d(dir.file("dpx.csv"));
    d << "precision,cudnn,configuration,run,op,calls,total_ms,ms_per_step,percent_of_step,gflops,host_ms_per_step,"
         "kernels_per_step,shape\n"
         // a depthwise 3x3 (forward: y x w b; backward: dx dw db dy x w) and a pointwise 1x1
         "tf32,heuristic,tiny_b64_none_cuda1,1,conv2d_forward,3,9,3,30,,0.1,1,8x32x56x56 8x32x56x56 32x1x3x3 - s1x1 p1x1 d1x1 g32\n"
         "tf32,heuristic,tiny_b64_none_cuda1,1,conv2d_forward,3,3,1,10,,0.1,1,8x64x56x56 8x32x56x56 64x32x1x1 - s1x1 p0x0 d1x1 g1\n"
         "tf32,heuristic,tiny_b64_none_cuda1,1,conv2d_backward,3,15,5,50,,0.1,2,8x32x56x56 32x1x3x3 - 8x32x56x56 8x32x56x56 32x1x3x3 s1x1 p1x1 d1x1 g32\n"
         "tf32,heuristic,tiny_b64_none_cuda1,1,conv2d_backward,3,6,2,20,,0.1,2,8x32x56x56 64x32x1x1 - 8x64x56x56 8x32x56x56 64x32x1x1 s1x1 p0x0 d1x1 g1\n";
    std::ofstream t(dir.file("torch.csv"));
    t << "engine,model,precision,batch,size,cudnn,op,calls_per_step,gpu_ms_per_step,host_ms_per_step,kernels_per_step,"
         "shape\n"
         "pytorch,tiny,tf32,64,56,heuristic,(step),1,6,8,40,\n"
         "pytorch,tiny,tf32,64,56,heuristic,aten::_conv_depthwise2d,1,0.5,0.1,,\"[[8,32,56,56],[32,1,3,3],[],[],[],[],[]]\"\n"
         "pytorch,tiny,tf32,64,56,heuristic,aten::cudnn_convolution,1,1.5,0.1,,\"[[8,32,56,56],[64,32,1,1],[],[],[],[],[]]\"\n"
         "pytorch,tiny,tf32,64,56,heuristic,aten::convolution_backward,1,1,0.1,,\"[[8,32,56,56],[8,32,56,56],[32,1,3,3],[],[],[],[],[],[],[],[]]\"\n"
         "pytorch,tiny,tf32,64,56,heuristic,aten::convolution_backward,1,3,0.1,,\"[[8,64,56,56],[8,32,56,56],[64,32,1,1],[],[],[],[],[],[],[],[]]\"\n";
  }
  const DpxResult cmp = run_command("python3 " + kSource + "/benchmarks/gpu/compare_profiles.py " + dir.file("dpx.csv") +
                                    " " + dir.file("torch.csv"));
  CAPTURE(cmp.output);
  REQUIRE(cmp.code == 0);
  // The kinds: the two shapes of each op summed (forward 3 + 1 against 0.5 + 1.5).
  CHECK(cmp.output.find("| **convolution forward** | 4.00 | 2.00 | +2.00 |") != std::string::npos);
  CHECK(cmp.output.find("| **convolution backward** | 7.00 | 4.00 | +3.00 |") != std::string::npos);
  // By shape: the depthwise layer loses 3 + 5 against 0.5 + 1, first; the pointwise one gains.
  const auto table = cmp.output.find("Convolutions of tiny, tf32, by shape (the 2 of 2 where dpx loses most");
  REQUIRE(table != std::string::npos);
  const auto depthwise = cmp.output.find("| 8x32x56x56 | 32x1x3x3 | s1x1 p1x1 d1x1 g32 | 3.00 | 0.50 | 5.00 | 1.00 | +6.50 |");
  const auto pointwise = cmp.output.find("| 8x32x56x56 | 64x32x1x1 | s1x1 p0x0 d1x1 g1 | 1.00 | 1.50 | 2.00 | 3.00 | -1.50 |");
  CHECK(depthwise != std::string::npos);
  CHECK(pointwise != std::string::npos);
  CHECK(table < depthwise);
  CHECK(depthwise < pointwise);
}
