// The op table of --profile-ops: per op and per step its time, host time and kernels ("-" when
// unknown, as for CPU ops or a GPU without CUPTI), and the step's totals — the kernel count of a
// GPU step among them; ops.csv carries the same columns.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tools/op_table.hpp"

using dpx::ops::profile::OpStats;
using dpx::tools::MeasuredSteps;

namespace {
OpStats gpu_op(const char* name, int64_t calls, double total_s, double host_s, int64_t kernels) {
  OpStats s;
  s.name = name;
  s.calls = calls;
  s.total_s = total_s;
  s.host_s = host_s;
  s.kernels = kernels;
  s.on_gpu = true;
  return s;
}
}  // namespace

TEST_CASE("GPU ops: GPU ms, host ms and kernels per step, and the step's kernel total") {
  // 2 measured steps of 10 ms each.
  const MeasuredSteps steps{2, 0.020};
  const std::vector<OpStats> ops = {gpu_op("conv2d_forward", 4, 0.008, 0.0004, 4),
                                    gpu_op("concat_channels", 20, 0.002, 0.0010, 60)};
  const std::string t = dpx::tools::op_table(ops, steps);
  CAPTURE(t);
  CHECK(t.find("host ms") != std::string::npos);
  CHECK(t.find("kernels") != std::string::npos);
  // concat: 2 ms / 2 steps = 1 ms per step, host 0.5 ms per step, 30 kernels per step.
  CHECK(t.find("concat_channels        20        2.00       1.000   10.00         -      0.500       30.0") !=
        std::string::npos);
  // all ops: 5 ms per step, 0.7 ms host, 32 kernels per step.
  CHECK(t.find("all ops                         10.00       5.000   50.00                0.700       32.0") !=
        std::string::npos);
  CHECK(t.find("GPU ops: ms is the GPU time between CUDA events") != std::string::npos);
  const std::string csv = dpx::tools::op_csv_header() + dpx::tools::op_csv_rows("cfg", 1, ops, steps);
  CHECK(csv.find(",host_ms_per_step,kernels_per_step,shape\n") != std::string::npos);
  CHECK(csv.find("cfg,1,concat_channels,20,2,1,10,,0.5,30,\n") != std::string::npos);
  CHECK(t.find("shape") == std::string::npos);  // by op: no shape column
}

TEST_CASE("an unknown kernel count is \"-\" for the op and for the step's total") {
  OpStats cpu;
  cpu.name = "relu_forward";
  cpu.calls = 3;
  cpu.total_s = cpu.host_s = 0.003;
  const std::string t = dpx::tools::op_table({gpu_op("conv2d_forward", 1, 0.001, 0.0001, 2), cpu}, {1, 0.01});
  CAPTURE(t);
  CHECK(t.find("relu_forward           3        3.00       3.000   30.00         -      3.000          -") !=
        std::string::npos);
  CHECK(t.find("all ops                         4.00       4.000   40.00                3.100          -") !=
        std::string::npos);
  const std::string csv = dpx::tools::op_csv_rows("c", 1, {cpu}, {1, 0.01});
  CHECK(csv == "c,1,relu_forward,3,3,3,30,,3,,\n");
}

TEST_CASE("--profile-shapes: a row per op and shape, the shape last in the table and in ops.csv") {
  OpStats a = gpu_op("conv2d_forward", 2, 0.004, 0.0002, 2), b = gpu_op("conv2d_forward", 2, 0.002, 0.0002, 2);
  a.shape = "64x32x112x112 64x32x112x112 32x1x3x3 - s1x1 p1x1 d1x1 g32";
  b.shape = "64x16x112x112 64x32x112x112 16x32x1x1 - s1x1 p0x0 d1x1 g1";
  const std::string t = dpx::tools::op_table({a, b}, {2, 0.010});
  CAPTURE(t);
  CHECK(t.find("kernels  shape\n") != std::string::npos);
  CHECK(t.find("conv2d_forward         2        4.00       2.000   40.00         -      0.100        1.0  "
               "64x32x112x112 64x32x112x112 32x1x3x3 - s1x1 p1x1 d1x1 g32\n") != std::string::npos);
  CHECK(t.find("a row per op and call shape") != std::string::npos);
  const std::string csv = dpx::tools::op_csv_rows("cfg", 1, {b}, {2, 0.010});
  CHECK(csv == "cfg,1,conv2d_forward,2,2,1,20,,0.1,1,64x16x112x112 64x32x112x112 16x32x1x1 - s1x1 p0x0 d1x1 g1\n");
}

TEST_CASE("an ops.csv from before the shape column is read in this dpx's columns") {
  const std::string old = "configuration,run,op,calls,total_ms,ms_per_step,percent_of_step,gflops,host_ms_per_step,"
                          "kernels_per_step\nc,1,relu_forward,3,3,3,30,,3,\nc,1,fill,1,1,1,10,,1,\n";
  CHECK(dpx::tools::op_csv_current(old) == dpx::tools::op_csv_header() + "c,1,relu_forward,3,3,3,30,,3,,\nc,1,fill,1,1,1,10,,1,,\n");
  const std::string current = dpx::tools::op_csv_header() + "c,1,fill,1,1,1,10,,1,,\n";
  CHECK(dpx::tools::op_csv_current(current) == current);
}
