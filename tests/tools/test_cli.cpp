// End-to-end tests of the dpx binary: exit codes and messages for bad input (2 for usage,
// 1 for runtime errors), and that a real run writes complete, parseable output files.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "run_dpx.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;

using dpx::testing::file_text;

namespace {

using Result = DpxResult;
Result run(const std::string& args) { return run_dpx(args); }

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("dpx_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

const std::string kQuick = "train --dataset synthetic --image-size 12 --synthetic-size 256 --steps 4 --epochs 1 --threads 2 ";

// A usage error: dpx run with args exits 2 with "dpx: error:" and a message containing needle.
struct UsageCase {
  std::string args, needle;
};

void check_usage_errors(const std::vector<UsageCase>& cases) {
  for (const auto& c : cases) {
    CAPTURE(c.args);
    Result r = run(c.args);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("dpx: error:") != std::string::npos);
    CHECK(r.output.find(c.needle) != std::string::npos);
  }
}

// A Chrome trace's tracks by (rank, tid): their names ("ops", "loader worker 0", ...).
using TrackNames = std::map<std::pair<int, int>, std::string>;
TrackNames track_names(const nlohmann::json& trace) {
  TrackNames names;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") names[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"];
  return names;
}

// The name of the track event `e` is on ("" for none).
std::string track_of(const TrackNames& names, const nlohmann::json& e) {
  const auto it = names.find({e["pid"].get<int>(), e["tid"].get<int>()});
  return it == names.end() ? "" : it->second;
}

}  // namespace

TEST_CASE("--version names dpx and Eigen") {
  Result r = run("--version");
  CHECK(r.code == 0);
  CHECK(r.output.find("dpx ") != std::string::npos);
  CHECK(r.output.find("Eigen ") != std::string::npos);
}

TEST_CASE("usage errors exit 2 with a message naming the flag") {
  std::vector<UsageCase> cases = {
      {"train --model nosuchnet", "unknown model 'nosuchnet'"},
      {"train --nosuchflag", "nosuchflag"},
      {kQuick + "--batch-size 0", "--batch-size must be at least 1"},
      {kQuick + "--batch-size -3", "--batch-size"},
      {kQuick + "--lr 0", "--lr must be a positive number"},
      {kQuick + "--lr -1", "--lr"},
      {kQuick + "--devices cpu:2 --parallel ddp --batch-size 7", "not divisible by the 2 ranks"},
      {kQuick + "--devices cpu:2", "--parallel is none"},
      {kQuick + "--devices gpu:1", "--devices 'gpu:1': use cpu:K, ref:K (K thread ranks) or cuda:N"},
      {kQuick + "--devices ref:0", "--devices 'ref:0': use cpu:K or ref:K with K >= 1"},
      {kQuick + "--devices ref:2", "--parallel is none"},
      {kQuick + "--parallel sideways", "unknown mode 'sideways'"},
      {kQuick + "--algo bogus --devices cpu:2 --parallel ddp", "unknown algorithm 'bogus'"},
      {"train --dataset imagenet", "unknown data set 'imagenet'"},
      {"train --dataset synthetic --image-size 2 --model lenet5", "needs an input of at least 4x4"},
      {kQuick + "--momentum 0", "Nesterov momentum needs --momentum > 0"},
      {kQuick + "--lr-schedule wavy", "unknown schedule 'wavy'"},
      {kQuick + "--loss-threshold -1", "--loss-threshold must be >= 0"},
      {kQuick + "--batch-size 512", "too few"},
      {"bench --models lenet5 --scaling sideways", "--scaling"},
      {kQuick + "--memory-budget 12XB", "--memory-budget"},
      {"bench --models lenet5 --dataset synthetic --profile-ops --cuda-graph", "--profile-ops times each op as it is launched"},
      {kQuick + "--memory-budget 0", "--memory-budget"},
  };
  check_usage_errors(cases);
}

TEST_CASE("optimizer flags: bad values and the other optimizer's flags are usage errors") {
  const std::string sgd_only = "--momentum and --nesterov/--no-nesterov apply to --optimizer sgd only";
  const std::string adamw_only = "--betas and --eps apply to --optimizer adamw only";
  std::vector<UsageCase> cases = {
      {kQuick + "--optimizer adam", "unknown optimizer 'adam': use sgd or adamw"},
      {kQuick + "--optimizer adamw --momentum 0.5", sgd_only},
      {kQuick + "--optimizer adamw --nesterov", sgd_only},
      {kQuick + "--optimizer adamw --no-nesterov", sgd_only},
      {kQuick + "--betas 0.9,0.99", adamw_only},
      {kQuick + "--optimizer sgd --eps 1e-6", adamw_only},
      {kQuick + "--optimizer adamw --betas 0.9", "--betas '0.9': use B1,B2"},
      {kQuick + "--optimizer adamw --betas 0.9,x", "--betas '0.9,x': use B1,B2"},
      {kQuick + "--optimizer adamw --betas 0.9,1", "--betas must both be in [0, 1)"},
      {kQuick + "--optimizer adamw --betas -0.1,0.9", "--betas must both be in [0, 1)"},
      {kQuick + "--optimizer adamw --eps -1", "--eps must be >= 0"},
      {kQuick + "--optimizer adamw --weight-decay -0.01", "--weight-decay must be >= 0"},
      {kQuick + "--optimizer adamw --lr 0", "--lr must be a positive number"},
      {"bench --models mlp --optimizer adamw --nesterov", sgd_only},
      {"bench --models mlp --betas 0.9,0.999", adamw_only},
  };
  check_usage_errors(cases);
}

TEST_CASE("runtime errors exit 1: missing data, unwritable output") {
  fs::path d = temp_dir("rt");
  fs::create_directories(d);
  Result missing = run("train --dataset mnist --data-dir " + (d / "nothing").string() + " --steps 2 --warmup 0");
  CHECK(missing.code == 1);
  CHECK(missing.output.find("dpx: error:") != std::string::npos);

  std::ofstream(d / "corrupt-images-idx3-ubyte") << "not an idx file";
  fs::create_directories(d / "bad");
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"})
    std::ofstream(d / "bad" / name) << "garbage that is not IDX";
  Result corrupt = run("train --dataset mnist --data-dir " + (d / "bad").string() + " --steps 2 --warmup 0");
  CHECK(corrupt.code == 1);
  CHECK(corrupt.output.find("magic") != std::string::npos);

  // Without a usable GPU (or without CUDA built in) a CUDA device is a runtime error that says so.
  Result gpu = run("train --dataset synthetic --image-size 12 --synthetic-size 256 --steps 2 --warmup 0 --devices cuda:0");
  if (gpu.code != 0) {
    CHECK(gpu.code == 1);
    CHECK(gpu.output.find("cuda:0") != std::string::npos);
    // ... and why: built without CUDA, no driver, a driver older than the runtime, or no GPU.
    const bool says_why = gpu.output.find("built without CUDA") != std::string::npos ||
                          gpu.output.find("no NVIDIA driver") != std::string::npos ||
                          gpu.output.find("older than the CUDA") != std::string::npos ||
                          gpu.output.find("sees no GPU") != std::string::npos ||
                          gpu.output.find("CUDA cannot start") != std::string::npos;
    CHECK(says_why);
  }
  CHECK(run("train --devices cuda:0 --parallel ddp --dataset synthetic").code == 2);

  std::ofstream(d / "afile") << "x";
  Result unwritable = run(kQuick + "--out " + (d / "afile" / "sub").string());
  CHECK(unwritable.code != 0);
  CHECK(unwritable.output.find("dpx: error:") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("a run writes steps.csv, summary.csv, config.json and a valid trace") {
  fs::path d = temp_dir("out");
  Result r = run(kQuick + "--model mlp --devices cpu:2 --parallel ddp --batch-size 16 --warmup 1 --deterministic --out " +
                 d.string() + " --trace " + (d / "trace.json").string() + " --trace-steps 0:3");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("step 4/4") != std::string::npos);
  CHECK(r.output.find("test accuracy") != std::string::npos);
  std::string steps = file_text(d / "steps.csv");
  CHECK(steps.rfind("rank,epoch,step,global_step,loss,load_s", 0) == 0);
  CHECK(std::count(steps.begin(), steps.end(), '\n') == 1 + 2 * 4);  // header + 2 ranks x 4 steps
  std::string summary = file_text(d / "summary.csv");
  CHECK(std::count(summary.begin(), summary.end(), '\n') == 2);
  CHECK(summary.find("parallel_efficiency") != std::string::npos);
  auto config = nlohmann::json::parse(file_text(d / "config.json"));
  CHECK(config["ranks"] == 2);
  CHECK(config["parallel"] == "ddp");
  CHECK(config["optimizer"] == "sgd");  // the defaults: SGD lr 0.05, Nesterov momentum 0.9
  CHECK(config["lr"].get<double>() == doctest::Approx(0.05));
  CHECK(config["momentum"].get<double>() == doctest::Approx(0.9));
  CHECK(config["nesterov"] == true);
  CHECK(config["weight_decay"] == 0.0);
  CHECK(config["betas"].is_null());
  CHECK(config["deterministic"] == true);  // GPU kernels' rule (kernels/determinism.hpp); CPU runs are anyway
  CHECK(config["tf32"] == false);
  CHECK(r.output.find("| SGD lr 0.05 momentum 0.9 wd 0 nesterov") != std::string::npos);
  auto trace = nlohmann::json::parse(file_text(d / "trace.json"));
  CHECK(trace["traceEvents"].size() > 8);
  for (auto& entry : fs::directory_iterator(d)) CHECK(entry.path().string().find(".tmp") == std::string::npos);
  fs::remove_all(d);
}

// Horovod's timeline and PyTorch's profiler show each all-reduce: so does the trace, one span per
// DDP bucket on its rank's all-reduce track, inside its step, with the bucket's size.
TEST_CASE("the trace has every DDP bucket's all-reduce on its rank's track, inside its step") {
  fs::path d = temp_dir("trace_buckets");
  Result r = run("train --dataset synthetic --image-size 28 --synthetic-size 256 --steps 4 --epochs 1 --threads 2 "
                 "--model lenet5 --devices cpu:2 --parallel ddp --batch-size 16 --bucket-mb 0 --warmup 1 --no-eval "
                 "--trace " + (d / "trace.json").string() + " --trace-steps 1:2");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const auto trace = nlohmann::json::parse(file_text(d / "trace.json"));
  std::map<std::pair<int, int64_t>, std::pair<double, double>> step_span;  // (rank, step) -> [begin, end]
  int track = -1;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["args"]["name"] == "all-reduce (buckets)") track = e["tid"].get<int>();
    if (e["ph"] == "X" && e["name"].get<std::string>().rfind("step ", 0) == 0)
      step_span[{e["pid"].get<int>(), std::stoll(e["name"].get<std::string>().substr(5))}] = {
          e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
  }
  REQUIRE(track >= 0);
  std::map<std::pair<int, int64_t>, std::set<int>> buckets;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["tid"] != track) continue;
    const auto& a = e["args"];
    const std::pair<int, int64_t> key{e["pid"].get<int>(), a["step"].get<int64_t>()};
    buckets[key].insert(a["bucket"].get<int>());
    CHECK(a["bytes_sent"].get<uint64_t>() > 0);
    CHECK(a["gradients"].get<int64_t>() > 0);
    CHECK(a["algorithm"] == "ring");
    REQUIRE(step_span.count(key));
    CHECK(e["ts"].get<double>() >= step_span[key].first);
    CHECK(e["ts"].get<double>() + e["dur"].get<double>() <= step_span[key].second + 1);  // µs rounding
  }
  // --bucket-mb 0: a bucket per parameter tensor (lenet5: 14), every one for both ranks and both
  // traced steps.
  CHECK(buckets.size() == 4);
  for (const auto& [key, set] : buckets) {
    CHECK(set.size() == 14);
    CHECK(*set.begin() == 0);
    CHECK(*set.rbegin() == 13);
  }
  fs::remove_all(d);
}

// PyTorch's profiler shows every op and the DataLoader's workers: so does the trace, with
// --profile-ops (which also prints the op table and writes ops.csv).
TEST_CASE("the trace has each loader worker's batches and, with --profile-ops, every op inside its step") {
  fs::path d = temp_dir("trace_ops");
  Result r = run("train --dataset synthetic --image-size 28 --synthetic-size 256 --steps 5 --epochs 1 --threads 2 "
                 "--model lenet5 --devices cpu:2 --parallel ddp --batch-size 16 --workers 2 --warmup 1 --no-eval "
                 "--profile-ops --out " + d.string() + " --trace " + (d / "trace.json").string() + " --trace-steps 2:3");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("conv2d_forward") != std::string::npos);  // the op table
  CHECK(r.output.find("memory high-water mark of the measured steps") != std::string::npos);
  CHECK(file_text(d / "ops.csv").find("lenet5,1,conv2d_forward,") != std::string::npos);
  const auto trace = nlohmann::json::parse(file_text(d / "trace.json"));
  const TrackNames tracks = track_names(trace);
  std::map<std::pair<int, int64_t>, std::pair<double, double>> step_span;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["name"].get<std::string>().rfind("step ", 0) == 0)
      step_span[{e["pid"].get<int>(), std::stoll(e["name"].get<std::string>().substr(5))}] = {
          e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
  std::map<std::pair<int, int64_t>, std::set<std::string>> ops;  // (rank, step) -> op names
  std::map<int, std::set<int64_t>> batches;                      // rank -> steps whose batch was traced
  std::set<std::string> workers;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string track = track_of(tracks, e);
    if (!e.contains("args") || !e["args"].contains("step")) continue;  // the phases: drawn from the step records
    const std::pair<int, int64_t> key{e["pid"].get<int>(), e["args"]["step"].get<int64_t>()};
    if (track == "ops") {
      ops[key].insert(e["name"].get<std::string>());
      REQUIRE(step_span.count(key));  // every op inside its step
      CHECK(e["ts"].get<double>() >= step_span[key].first - 1);
      CHECK(e["ts"].get<double>() + e["dur"].get<double>() <= step_span[key].second + 1);
    } else if (track.rfind("loader worker ", 0) == 0) {
      workers.insert(track);
      CHECK(e["name"] == "batch for step " + std::to_string(key.second));
      CHECK(e["args"]["images"] == 8);  // a global batch of 16 over 2 ranks
      REQUIRE(step_span.count(key));  // made before its step ended (prefetched: often before it began)
      CHECK(e["ts"].get<double>() + e["dur"].get<double>() <= step_span[key].second + 1);
      batches[key.first].insert(key.second);
    }
  }
  CHECK(ops.size() == 4);  // 2 ranks x steps 2 and 3
  for (const auto& [key, names] : ops)
    for (const char* op : {"conv2d_forward", "conv2d_backward", "linear_forward", "cross_entropy_backward", "sgd_step"}) {
      CAPTURE(key.first);
      CAPTURE(op);
      CHECK(names.count(op) == 1);
    }
  CHECK(batches == std::map<int, std::set<int64_t>>{{0, {2, 3}}, {1, {2, 3}}});
  CHECK(!workers.empty());
  for (const std::string& w : workers) CHECK((w == "loader worker 0" || w == "loader worker 1"));
  fs::remove_all(d);
}

// DataParallel runs its replicas' forward and backward on threads of their own: each replica's
// ops are on its own row of the trace (the rank its step records name), the master's (the loss,
// the optimizer) on replica 0's.
TEST_CASE("with --parallel dp and --profile-ops, each replica's ops are on its own ops track") {
  fs::path d = temp_dir("trace_dp_ops");
  Result r = run("train --dataset synthetic --image-size 28 --synthetic-size 256 --steps 4 --epochs 1 --threads 2 "
                 "--model lenet5 --devices cpu:2 --parallel dp --batch-size 16 --warmup 1 --no-eval --profile-ops "
                 "--out " + d.string() + " --trace " + (d / "trace.json").string() + " --trace-steps 2:2");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const auto trace = nlohmann::json::parse(file_text(d / "trace.json"));
  const TrackNames tracks = track_names(trace);
  std::map<int, std::set<std::string>> ops;  // rank -> op names
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && track_of(tracks, e) == "ops") {
      CHECK(e["args"]["step"] == 2);
      ops[e["pid"].get<int>()].insert(e["name"].get<std::string>());
    }
  REQUIRE(ops.size() == 2);
  for (int replica : {0, 1})
    for (const char* op : {"conv2d_forward", "conv2d_backward", "linear_backward"}) {
      CAPTURE(replica);
      CAPTURE(op);
      CHECK(ops[replica].count(op) == 1);
    }
  CHECK(ops[0].count("sgd_step") == 1);  // the master's update
  CHECK(ops[1].count("sgd_step") == 0);
  fs::remove_all(d);
}

// What dpx bench --batch-sizes max found, trained at under the same budget: the host block cache
// gives free segments back rather than hold more (core/host_cache.hpp), and says how much.
TEST_CASE("train --memory-budget makes the host block cache give back what it would hold past it") {
  const std::string train = "train --dataset synthetic --image-size 64 --channels 3 --synthetic-size 128 --steps 3 "
                            "--epochs 1 --no-eval --model resnet18 --batch-size 32 --threads 1 ";
  Result free = run(train);
  REQUIRE(free.code == 0);
  CHECK(free.output.find("memory budget") == std::string::npos);
  // resnet18 at 64x64, batch 32: 217 MB of live tensors, so a 200 MB budget is passed every step.
  Result tight = run(train + "--memory-budget 200MB");
  CAPTURE(tight.output);
  REQUIRE(tight.code == 0);
  const size_t at = tight.output.find("memory budget: 200 MB (--memory-budget); the host block cache gave ");
  REQUIRE(at != std::string::npos);
#if defined(DPX_SANITIZE)  // the cache is off under the sanitizers (core/tensor.hpp): nothing is kept to give back
  CHECK(std::stod(tight.output.substr(at + 67)) == 0);
#else
  CHECK(std::stod(tight.output.substr(at + 67)) > 0);
#endif
}

TEST_CASE("--optimizer adamw trains, with torch's defaults unless flags say otherwise") {
  fs::path d = temp_dir("adamw");
  Result r = run(kQuick + "--model mlp --optimizer adamw --out " + d.string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("| AdamW lr 0.001 betas 0.9,0.999 eps 1e-08 wd 0.01 ") != std::string::npos);
  auto config = nlohmann::json::parse(file_text(d / "config.json"));
  CHECK(config["optimizer"] == "adamw");
  CHECK(config["lr"].get<double>() == doctest::Approx(1e-3));
  CHECK(config["weight_decay"].get<double>() == doctest::Approx(1e-2));
  CHECK(config["betas"][0].get<double>() == doctest::Approx(0.9));
  CHECK(config["betas"][1].get<double>() == doctest::Approx(0.999));
  CHECK(config["eps"].get<double>() == doctest::Approx(1e-8));
  CHECK(config["momentum"].is_null());  // SGD's settings do not apply
  CHECK(config["nesterov"].is_null());

  Result given = run(kQuick + "--model mlp --optimizer adamw --lr 0.002 --betas 0.8,0.99 --eps 1e-6 "
                     "--weight-decay 0 --out " + d.string());
  CAPTURE(given.output);
  REQUIRE(given.code == 0);
  CHECK(given.output.find("| AdamW lr 0.002 betas 0.8,0.99 eps 1e-06 wd 0 ") != std::string::npos);
  config = nlohmann::json::parse(file_text(d / "config.json"));
  CHECK(config["weight_decay"] == 0.0);
  CHECK(config["betas"][0].get<double>() == doctest::Approx(0.8));

  Result help = run("train --help");
  CHECK(help.code == 0);
  for (const char* flag : {"--optimizer", "--betas", "--eps", "--weight-decay", "adamw only", "sgd only"})
    CHECK(help.output.find(flag) != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("bench writes results.csv with one row per configuration and POP columns") {
  fs::path d = temp_dir("bench");
  Result r = run("bench --models mlp --image-size 12 --synthetic-size 512 --batch-sizes 8,16 --devices cpu:1,2 "
                 "--steps 4 --warmup 1 --threads 2 --out " + d.string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  std::string csv = file_text(d / "results.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 4);
  CHECK(csv.find("load_balance,comm_efficiency,parallel_efficiency") != std::string::npos);
  CHECK(fs::exists(d / "steps" / "mlp_b16_ddp_cpu2.csv"));
  // The command that made the folder, as one shell line naming the program dpx (not its path).
  CHECK(file_text(d / "command.txt") == "dpx bench --models mlp --image-size 12 --synthetic-size 512 --batch-sizes 8,16 "
                                       "--devices cpu:1,2 --steps 4 --warmup 1 --threads 2 --out " + d.string() + "\n");
  fs::remove_all(d);
}

TEST_CASE("--conv-algo: config.json records each convolution's algorithm; --verbose prints them") {
  const std::string lenet = "train --dataset synthetic --image-size 28 --synthetic-size 64 --steps 2 --batch-size 16 "
                            "--threads 2 --model lenet5 --devices cpu:1 --no-eval --warmup 1 ";
  {
    fs::path d = temp_dir("conv_dpx");
    Result r = run(lenet + "--conv-algo dpx --verbose --out " + d.string());
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    CHECK(r.output.find("CPU convolutions (--conv-algo dpx)") != std::string::npos);
    auto config = nlohmann::json::parse(file_text(d / "config.json"));
    CHECK(config["conv_algo"] == "dpx");
    CHECK(config["conv_choices"].empty());  // dpx's kernels are not a choice: nothing chosen
    fs::remove_all(d);
  }
  if (run("--version").output.find("oneDNN: not built") == std::string::npos) {
    fs::path d = temp_dir("conv_onednn");
    Result r = run(lenet + "--conv-algo onednn --verbose --out " + d.string());
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    CHECK(r.output.find("onednn  (forced; 2 threads)") != std::string::npos);
    auto config = nlohmann::json::parse(file_text(d / "config.json"));
    CHECK(config["conv_algo"] == "onednn");
    // lenet5's two convolutions, forward and backward (the first needs no dx: still a choice).
    REQUIRE(config["conv_choices"].size() == 4);
    for (const auto& c : config["conv_choices"]) CHECK(c["algo"] == "onednn");
    CHECK(config["conv_choices"][0]["shape"] == "16x1x28x28 -> 6 5x5 s1 p2 d1 g1 +bias");
    fs::remove_all(d);
  }
  check_usage_errors({{lenet + "--conv-algo fast", "--conv-algo"}});
}

// --omp-wait sets OMP_WAIT_POLICY, which OpenMP reads as the program loads: dpx runs itself again
// with it (tools/train_flags.cpp, apply_omp_wait); config.json says which policy the run had.
TEST_CASE("--omp-wait passive and active run dpx with OMP_WAIT_POLICY set; default leaves it") {
  const dpx::testing::TempDir dir("omp_wait");
  const std::string train = "train --model mlp --dataset synthetic --image-size 8 --channels 1 --synthetic-size 256 "
                            "--steps 3 --warmup 1 --epochs 1 --batch-size 16 --no-eval ";
  for (const char* policy : {"passive", "active", "default"}) {
    CAPTURE(policy);
    const std::string out = dir.file(policy);
    DpxResult r = run_command(std::string("env -u OMP_WAIT_POLICY ") + DPX_BINARY + " " + train + "--omp-wait " +
                              policy + " --out " + out);
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    const auto config = nlohmann::json::parse(dpx::testing::file_text(out + "/config.json"));
    const std::string want = std::string(policy) == "passive" ? "PASSIVE" : std::string(policy) == "active" ? "ACTIVE" : "default";
    CHECK(config["omp_wait_policy"] == want);
  }
  // The user's own OMP_WAIT_POLICY stands where the flag says default.
  DpxResult mine = run_command(std::string("OMP_WAIT_POLICY=passive ") + DPX_BINARY + " " + train + "--out " +
                               dir.file("env"));
  CAPTURE(mine.output);
  REQUIRE(mine.code == 0);
  CHECK(nlohmann::json::parse(dpx::testing::file_text(dir.file("env") + "/config.json"))["omp_wait_policy"] == "passive");
  DpxResult bad = run_dpx(train + "--omp-wait sometimes");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--omp-wait: sometimes not in {default,active,passive}") != std::string::npos);
}
