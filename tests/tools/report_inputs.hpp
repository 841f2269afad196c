// The small real runs dpx report's tests read: a dpx bench folder (lenet5, cpu:1,2, synthetic
// data, a few steps) and a dpx collective --csv file, made once per test process.
#pragma once
#include <doctest/doctest.h>

#include <string>

#include "../common/files.hpp"
#include "run_dpx.hpp"

struct ReportInputs {
  dpx::testing::TempDir dir{"report_inputs"};
  std::string bench = dir.file("bench"), coll = dir.file("c.csv");
  ReportInputs() {
    DpxResult b = run_dpx("bench --models lenet5 --batch-sizes 8 --devices cpu:1,2 --dataset synthetic --image-size 28 "
                          "--steps 3 --warmup 1 --out " + bench);
    CAPTURE(b.output);
    REQUIRE(b.code == 0);
    DpxResult c = run_dpx("collective -b 1K -e 64K -f 4 -n 2 -w 1 --algo all --csv " + coll);
    CAPTURE(c.output);
    REQUIRE(c.code == 0);
  }
};

inline ReportInputs& report_inputs() {
  static ReportInputs inputs;
  return inputs;
}
