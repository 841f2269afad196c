// dpx plot end to end: small real dpx bench and dpx collective runs, then the figures' PNGs
// (signature and IHDR size), SVGs (well formed ends, one gnuplot group per series) and captions;
// bad inputs exit 2 and write nothing; a missing gnuplot exits 1 naming gnuplot-nox.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "analysis/gnuplot.hpp"
#include "../common/files.hpp"
#include "run_dpx.hpp"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Without gnuplot the figures cannot be drawn: the test binary ends with 77 (ctest: skipped).
void require_gnuplot() {
  if (dpx::analysis::find_executable("gnuplot").empty()) {
    std::printf("skipped: gnuplot is not installed (Debian: apt-get install gnuplot-nox)\n");
    std::fflush(stdout);
    std::_Exit(77);
  }
}

struct PngSize {
  bool ok = false;
  uint32_t width = 0, height = 0;
};

// The PNG signature, then the IHDR chunk first with the width and height, big-endian.
PngSize png_size(const std::string& bytes) {
  static const std::string sig = "\x89PNG\r\n\x1a\n";
  PngSize s;
  if (bytes.size() < 24 || bytes.compare(0, 8, sig) != 0 || bytes.compare(12, 4, "IHDR") != 0) return s;
  auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
    return v;
  };
  s.ok = true;
  s.width = be32(16);
  s.height = be32(20);
  return s;
}

// gnuplot's SVG terminal wraps each plotted series in <g id="gnuplot_plot_N">.
int svg_series(const std::string& svg) {
  int n = 0;
  for (size_t at = svg.find("<g id=\"gnuplot_plot_"); at != std::string::npos;
       at = svg.find("<g id=\"gnuplot_plot_", at + 1))
    ++n;
  return n;
}

bool svg_well_formed(const std::string& svg) {
  const bool starts = svg.rfind("<?xml", 0) == 0 || svg.rfind("<svg", 0) == 0;
  const size_t end = svg.find_last_not_of(" \n\r\t");
  return starts && end != std::string::npos && end >= 5 && svg.compare(end - 5, 6, "</svg>") == 0;
}

void check_figure(const dpx::testing::TempDir& out, const std::string& stem, int series, int width, int height) {
  CAPTURE(stem);
  const PngSize p = png_size(slurp(out.file(stem + ".png")));
  CHECK(p.ok);
  CHECK(p.width == static_cast<uint32_t>(width));
  CHECK(p.height == static_cast<uint32_t>(height));
  const std::string svg = slurp(out.file(stem + ".svg"));
  CHECK(svg_well_formed(svg));
  CHECK(svg_series(svg) == series);
  const std::string caption = slurp(out.file(stem + ".txt"));
  CHECK(caption.find("data: ") != std::string::npos);
}

// The bench and collective runs every case uses, made once.
struct Data {
  dpx::testing::TempDir dir{"plot_cli"};
  std::string bench = dir.file("bench"), coll = dir.file("c.csv");
  Data() {
    DpxResult b = run_dpx("bench --models lenet5 --batch-sizes 8 --devices cpu:1,2 --dataset synthetic --image-size 28 "
                          "--steps 3 --warmup 1 --out " + bench);
    CAPTURE(b.output);
    REQUIRE(b.code == 0);
    DpxResult c = run_dpx("collective -b 1K -e 64K -f 4 -n 2 -w 1 --algo all --csv " + coll);
    CAPTURE(c.output);
    REQUIRE(c.code == 0);
  }
};

Data& data() {
  static Data d;
  return d;
}

// A small dpx bench run into a folder of `dir`: lenet5 at batch 8 (or `batch_sizes`) on 1 and 2 CPU ranks, synthetic
// data, a few steps, with `extra` flags.
std::string small_bench(const dpx::testing::TempDir& dir, const std::string& name, const std::string& extra,
                        const std::string& batch_sizes = "8") {
  const std::string out = dir.file(name);
  DpxResult b = run_dpx("bench --models lenet5 --batch-sizes " + batch_sizes + " --devices cpu:1,2 --dataset synthetic --image-size 28 "
                        "--steps 2 --warmup 1 " + extra + " --out " + out);
  CAPTURE(b.output);
  REQUIRE(b.code == 0);
  return out;
}

// A figure asked for without its data: exit 2 naming the run to make, nothing written.
void check_needs(const std::string& inputs, const std::string& figure, const std::string& run) {
  dpx::testing::TempDir dir("plot_needs");
  const std::string out = dir.file("figs");
  DpxResult r = run_dpx("plot " + inputs + " --figure " + figure + " --out " + out);
  CAPTURE(figure);
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find(run) != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out));
}

}  // namespace

TEST_CASE("dpx plot draws every figure from a bench folder and a collective CSV") {
  require_gnuplot();
  Data& d = data();
  dpx::testing::TempDir out("plot_out");
  DpxResult r = run_dpx("plot " + d.bench + " " + d.coll + " --out " + out.path.string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  // One model at one batch size: throughput has the measured and the ideal line; phases six
  // stacked phases and the measured step; busbw one line per all-reduce algorithm (threads).
  check_figure(out, "throughput", 3, 960, 640);  // and the ideal line's legend entry
  check_figure(out, "scaling", 2, 960, 640);     // and ideal scaling's line
  check_figure(out, "phases-lenet5-b8", 7, 960, 640);
  check_figure(out, "efficiency-lenet5-b8", 4, 960, 640);
  check_figure(out, "busbw-all_reduce", 6, 960, 640);  // 5 algorithms and the memcpy limit
  check_figure(out, "best-devices", 2, 960, 640);
  check_figure(out, "comm-compute-lenet5-b8", 3, 960, 640);
  check_figure(out, "bytes-per-epoch", 2, 960, 640);
  check_figure(out, "loss", 2, 960, 640);
  // The caption quotes the command that made the bench folder (its command.txt).
  CHECK(slurp(out.file("throughput.txt")).find("from dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2") !=
        std::string::npos);
  CHECK(slurp(out.file("busbw-all_reduce.txt")).find("dpx collective") != std::string::npos);
  // Only the figures and their captions: no script, log or temporary left.
  CHECK(out.entries().size() == 27);
}

TEST_CASE("dpx plot --figure draws only the figures named, at the size asked") {
  require_gnuplot();
  Data& d = data();
  dpx::testing::TempDir out("plot_out");
  DpxResult r = run_dpx("plot " + d.coll + " " + d.bench + "/results.csv --figure 'busbw, throughput' --width 640 "
                        "--height 480 --out " + out.path.string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  check_figure(out, "throughput", 3, 640, 480);
  check_figure(out, "busbw-all_reduce", 6, 640, 480);
  CHECK(out.entries().size() == 6);
}

TEST_CASE("dpx plot --list names every figure and the data it needs") {
  DpxResult r = run_dpx("plot --list");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  for (const char* name : {"throughput:", "phases:", "busbw:", "efficiency:", "best-devices:", "comm-compute:", "bytes-per-epoch:", "loss:", "timeline:", "loading:", "dpx collective --csv", "dpx bench"})
    CHECK(r.output.find(name) != std::string::npos);
}

TEST_CASE("dpx plot refuses missing, empty and foreign inputs with exit 2 and writes nothing") {
  Data& d = data();
  dpx::testing::TempDir dir("plot_bad");
  const std::string out = dir.file("figs");
  std::ofstream(dir.file("empty.csv")).close();
  std::ofstream(dir.file("foreign.csv")) << "a,b,c\n1,2,3\n";
  std::ofstream(dir.file("header_only.csv")) << slurp(d.coll).substr(0, slurp(d.coll).find('\n') + 1);
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {dir.file("missing.csv"), "missing.csv"},
      {dir.file("empty.csv"), "empty.csv"},
      {dir.file("foreign.csv"), "foreign.csv"},
      {dir.file("header_only.csv"), "header_only.csv"},
      {dir.path.string(), "without results.csv"},
      {d.coll + " --figure throughput", "dpx bench --models"},
      {d.bench + " --figure busbw", "dpx collective --algo all"},
      {d.bench + " --figure loading", "swept two or more --workers"},
      {d.bench + " --figure nosuch", "--figure"},
      {"", "at least one"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    DpxResult r = run_dpx("plot " + c.args + " --out " + out);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.expect) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out));
  }
}

TEST_CASE("dpx plot without gnuplot says which package to install, exit 1, nothing written") {
  Data& d = data();
  dpx::testing::TempDir dir("plot_nognuplot");
  const std::string out = dir.file("figs");
  DpxResult r = run_dpx("plot " + d.bench + " --gnuplot " + dir.file("no-gnuplot") + " --out " + out);
  CAPTURE(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("gnuplot-nox") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("dpx plot leaves nothing when gnuplot fails") {
  require_gnuplot();
  Data& d = data();
  dpx::testing::TempDir dir("plot_gnuplot_fails");
  const std::string out = dir.file("figs");
  DpxResult r = run_dpx("plot " + d.bench + " --gnuplot /bin/false --out " + out);
  CAPTURE(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("gnuplot") != std::string::npos);
  CHECK(std::filesystem::is_directory(out));
  CHECK(std::filesystem::is_empty(out));
}

TEST_CASE("dpx plot reads results.csv by column name: new columns, reordered, more models") {
  require_gnuplot();
  Data& d = data();
  dpx::testing::TempDir dir("plot_columns");
  // Every line gets a new first column; each row comes again as another model, so there are
  // two groups: throughput has four lines, phases and efficiency one figure each per model.
  std::istringstream in(slurp(d.bench + "/results.csv"));
  std::string line, header, rows, again;
  std::getline(in, header);
  const size_t model_col = [&] {
    size_t col = 0;
    for (size_t at = 0; at < header.find("model,"); ++at) col += header[at] == ',';
    return col;
  }();
  while (std::getline(in, line)) {
    rows += "7," + line + "\n";
    std::string copy = line;
    size_t at = 0;
    for (size_t c = 0; c < model_col; ++c) at = copy.find(',', at) + 1;
    copy.insert(at, "other");  // the model "otherlenet5"
    again += "7," + copy + "\n";
  }
  std::filesystem::create_directories(dir.file("b"));
  std::ofstream(dir.file("b/results.csv")) << "a_new_column," << header << "\n" << rows << again;
  DpxResult r = run_dpx("plot " + dir.file("b") + " --out " + dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const std::string figs = dir.file("figs");
  auto series = [&](const std::string& stem) { return svg_series(slurp(figs + "/" + stem + ".svg")); };
  CHECK(series("throughput") == 5);  // and the ideal line's legend entry
  CHECK(series("phases-lenet5-b8") == 7);
  CHECK(series("phases-otherlenet5-b8") == 7);
  CHECK(series("efficiency-otherlenet5-b8") == 4);

  // A column the figures read, gone: a usage error naming the file and the column.
  std::string cut = header;
  cut.replace(cut.find("mean_wait_s"), 11, "mean_idle_s");
  std::ofstream(dir.file("b/results.csv")) << cut << "\n" << slurp(d.bench + "/results.csv").substr(header.size() + 1);
  DpxResult bad = run_dpx("plot " + dir.file("b") + " --out " + dir.file("figs2"));
  CAPTURE(bad.output);
  CHECK(bad.code == 2);
  CHECK(bad.output.find("mean_wait_s") != std::string::npos);
  CHECK(bad.output.find("results.csv") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("figs2")));
}

TEST_CASE("dpx plot --help lists its flags") {
  DpxResult r = run_dpx("plot --help");
  REQUIRE(r.code == 0);
  for (const char* flag : {"--out", "--figure", "--list", "--min-efficiency", "--steps", "--gnuplot", "--width", "--height", "gnuplot-nox"})
    CHECK(r.output.find(flag) != std::string::npos);
}

TEST_CASE("dpx plot throughput draws the confidence interval of --repeat 3 as error bars") {
  require_gnuplot();
  dpx::testing::TempDir dir("plot_repeat");
  const std::string bench = small_bench(dir, "bench", "--repeat 3");
  DpxResult r = run_dpx("plot " + bench + " --figure throughput --out " + dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const std::string svg = slurp(dir.file("figs/throughput.svg"));
  CHECK(svg_series(svg) == 3);
  CHECK(svg.find("lenet5 batch 8/rank (median, CI)") != std::string::npos);
  // 3 runs: the interval is [min, max], which holds the median with probability 75 %.
  CHECK(slurp(dir.file("figs/throughput.txt")).find("median of 3 runs, 75 % CI") != std::string::npos);
  // The loss figure draws a configuration's first run only: the repeats train alike.
  REQUIRE(run_dpx("plot " + bench + " --figure loss --out " + dir.file("loss")).code == 0);
  CHECK(svg_series(slurp(dir.file("loss/loss.svg"))) == 2);  // 1 and 2 ranks
  CHECK(slurp(dir.file("loss/loss.txt")).find("the first (the others train alike)") != std::string::npos);
  CHECK(png_size(slurp(dir.file("figs/throughput.png"))).width == 960);

  // One run: no interval, no error bars, no such caption.
  Data& d = data();
  DpxResult one = run_dpx("plot " + d.bench + " --figure throughput --out " + dir.file("figs1"));
  REQUIRE(one.code == 0);
  CHECK(slurp(dir.file("figs1/throughput.svg")).find("(median, CI)") == std::string::npos);
  CHECK(slurp(dir.file("figs1/throughput.txt")).find("% CI") == std::string::npos);
}

TEST_CASE("dpx plot best-devices: per model against batch size, the fastest and the most efficient device count") {
  require_gnuplot();
  dpx::testing::TempDir dir("plot_best");
  const std::string bench = small_bench(dir, "bench", "", "4,8");
  DpxResult r = run_dpx("plot " + bench + " --figure best-devices --min-efficiency 0.5 --out " + dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  // One model: the throughput-optimal line and the efficient one.
  check_figure(dir, "figs/best-devices", 2, 960, 640);
  const std::string caption = slurp(dir.file("figs/best-devices.txt"));
  CHECK(caption.find("at least 0.5 (--min-efficiency)") != std::string::npos);
  CHECK(slurp(dir.file("figs/best-devices.svg")).find("batch size per rank") != std::string::npos);

  // One device count: nothing to choose among.
  const std::string one = dir.file("one");
  DpxResult b = run_dpx("bench --models mlp --batch-sizes 8 --devices cpu:1 --dataset synthetic --steps 2 --warmup 1 "
                        "--out " + one);
  REQUIRE(b.code == 0);
  check_needs(one, "best-devices", "two or more device counts");
  check_needs(data().coll, "best-devices", "dpx bench --models");
  for (const char* bad : {"0", "1.5", "-1"}) {
    DpxResult v = run_dpx("plot " + bench + " --figure best-devices --min-efficiency " + bad + " --out " +
                          dir.file("bad"));
    CAPTURE(v.output);
    CHECK(v.code == 2);
    CHECK(v.output.find("--min-efficiency") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.file("bad")));
  }
}

TEST_CASE("dpx plot comm-compute and bytes-per-epoch: computation against communication, bytes by formula and counted") {
  require_gnuplot();
  Data& d = data();
  dpx::testing::TempDir dir("plot_comm");
  DpxResult r = run_dpx("plot " + d.bench + " --figure comm-compute,bytes-per-epoch --out " + dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  // Three bars a device count: computation, communication in all, communication exposed.
  check_figure(dir, "figs/comm-compute-lenet5-b8", 3, 960, 640);
  // One model: the formula's line and the counted one.
  check_figure(dir, "figs/bytes-per-epoch", 2, 960, 640);
  CHECK(dir.entries().size() == 1);
  CHECK(slurp(dir.file("figs/bytes-per-epoch.txt")).find("bytes_per_epoch_counted") != std::string::npos);
  const std::string svg = slurp(dir.file("figs/comm-compute-lenet5-b8.svg"));
  CHECK(svg.find("communication, exposed") != std::string::npos);
  check_needs(d.coll, "comm-compute", "dpx bench --models");
  check_needs(d.coll, "bytes-per-epoch", "dpx bench --models");

  // A results.csv from before the columns: a usage error saying which column and the run.
  std::istringstream in(slurp(d.bench + "/results.csv"));
  std::string header, body, line;
  std::getline(in, header);
  while (std::getline(in, line)) body += line + "\n";
  std::filesystem::create_directories(dir.file("old"));
  std::string renamed = header;
  renamed.replace(renamed.find("bytes_per_epoch_counted"), 23, "bytes_counted_elsewhere");
  renamed.replace(renamed.find("mean_comm_total_s"), 17, "mean_comm_sum_s");
  std::ofstream(dir.file("old/results.csv")) << renamed << "\n" << body;
  check_needs(dir.file("old"), "bytes-per-epoch", "bytes_per_epoch_counted");
  check_needs(dir.file("old"), "comm-compute", "mean_comm_total_s");
}

TEST_CASE("dpx plot loss: rank 0's loss against global step, the --loss-threshold line and where each run crossed it") {
  require_gnuplot();
  dpx::testing::TempDir dir("plot_loss");
  // Every loss of an untrained 10-class network lies below 5: each run crosses at its first step.
  const std::string bench = small_bench(dir, "bench", "--loss-threshold 5");
  DpxResult r = run_dpx("plot " + bench + " --figure loss --out " + dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  // A line per configuration (1 and 2 ranks), the threshold, the crossings.
  check_figure(dir, "figs/loss", 4, 960, 640);
  const std::string svg = slurp(dir.file("figs/loss.svg"));
  for (const char* title : {"lenet5_b8_ddp_cpu1", "lenet5_b8_ddp_cpu2", "loss threshold 5", "first step below"})
    CHECK(svg.find(title) != std::string::npos);
  CHECK(slurp(dir.file("figs/loss.txt")).find("--loss-threshold 5") != std::string::npos);

  // results.csv alone, without the steps: a usage error naming the run.
  std::filesystem::create_directories(dir.file("alone"));
  std::filesystem::copy_file(bench + "/results.csv", dir.file("alone/results.csv"));
  check_needs(dir.file("alone"), "loss", "--loss-threshold");
  check_needs(data().coll, "loss", "dpx bench --models");
}

TEST_CASE("dpx plot timeline: a dpx train --trace file as a row of phase boxes per rank") {
  require_gnuplot();
  dpx::testing::TempDir dir("plot_timeline");
  const std::string trace = dir.file("t.json");
  DpxResult t = run_dpx("train --model lenet5 --dataset synthetic --image-size 28 --devices cpu:2 --parallel ddp "
                        "--batch-size 8 --steps 4 --trace " + trace + " --trace-steps 0:3");
  CAPTURE(t.output);
  REQUIRE(t.code == 0);
  // Recognised by its content, whatever its name; only the timeline has its data.
  std::filesystem::copy_file(trace, dir.file("trace.csv"));
  DpxResult r = run_dpx("plot " + dir.file("trace.csv") + " --steps 1:2 --width 800 --height 400 --out " +
                        dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  // One series per phase the CPU run traces: load, forward, backward, comm (exposed), optimizer,
  // and the band of the buckets' all-reduces.
  check_figure(dir, "figs/timeline", 6, 800, 400);
  const std::string svg = slurp(dir.file("figs/timeline.svg"));
  for (const char* text : {"rank 0", "rank 1", "comm (exposed)", "time (ms)", "all-reduce (each bucket)"})
    CHECK(svg.find(text) != std::string::npos);
  const std::string caption = slurp(dir.file("figs/timeline.txt"));
  CHECK(caption.find("steps 1 to 2") != std::string::npos);
  CHECK(caption.find("each DDP bucket's all-reduce") != std::string::npos);

  check_needs(data().bench, "timeline", "--trace t.json");
  // A window the trace does not hold, a malformed window, JSON that is no trace: exit 2, nothing written.
  std::ofstream(dir.file("other.json")) << "{\"a\": 1}";
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {trace + " --steps 50:60", "--trace-steps"},
      {trace + " --steps 3", "--steps"},
      {trace + " --steps 2:1", "--steps"},
      {trace + " --steps x:2", "--steps"},
      {dir.file("other.json"), "traceEvents"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    DpxResult bad = run_dpx("plot " + c.args + " --out " + dir.file("bad"));
    CAPTURE(bad.output);
    CHECK(bad.code == 2);
    CHECK(bad.output.find(c.expect) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.file("bad")));
  }
}

TEST_CASE("dpx plot keeps weak and strong scaling apart: their series and figures") {
  require_gnuplot();
  dpx::testing::TempDir dir("plot_scaling");
  const std::string bench = small_bench(dir, "bench", "--scaling weak,strong");
  dpx::testing::TempDir out("plot_scaling_out");
  DpxResult r = run_dpx("plot " + bench + " --out " + out.path.string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  // Batch 8 per rank (weak) and 8 in all (strong): two measured lines and their two ideal ones.
  check_figure(out, "throughput", 5, 960, 640);
  check_figure(out, "phases-lenet5-b8-weak", 7, 960, 640);
  check_figure(out, "phases-lenet5-b8-strong", 7, 960, 640);
  const std::string svg = slurp(out.file("throughput.svg"));
  CHECK(svg.find("lenet5 batch 8/rank weak") != std::string::npos);
  CHECK(svg.find("lenet5 batch 8 strong") != std::string::npos);
  // Side by side in one figure: weak (solid) and strong (dashed) scaling efficiency.
  check_figure(out, "weak-strong-lenet5", 2, 960, 640);
  const std::string ws = slurp(out.file("weak-strong-lenet5.svg"));
  CHECK(ws.find("weak, batch 8 per rank") != std::string::npos);
  CHECK(ws.find("strong, batch 8 in all") != std::string::npos);
  // Without both scalings the figure is refused, naming the run to make.
  check_needs(data().bench, "weak-strong", "--scaling weak,strong");
}

TEST_CASE("dpx plot reads a dpx train folder: its loss against step and against epoch") {
  require_gnuplot();
  dpx::testing::TempDir dir("plot_train");
  const std::string run = dir.file("run");
  DpxResult t = run_dpx("train --model lenet5 --dataset synthetic --synthetic-size 96 --image-size 28 --devices cpu:2 "
                        "--parallel ddp --batch-size 16 --epochs 3 --warmup 0 --no-eval --out " + run);
  CAPTURE(t.output);
  REQUIRE(t.code == 0);
  DpxResult r = run_dpx("plot " + run + " --figure loss,loss-epoch --out " + dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  check_figure(dir, "figs/loss", 1, 960, 640);
  check_figure(dir, "figs/loss-epoch", 1, 960, 640);
  CHECK(slurp(dir.file("figs/loss-epoch.svg")).find("epoch") != std::string::npos);
  CHECK(slurp(dir.file("figs/loss-epoch.txt")).find("from dpx train (model lenet5") != std::string::npos);
  // A bench folder holds one epoch per run: loss-epoch names the run to make.
  check_needs(data().bench, "loss-epoch", "--epochs 3");
}

TEST_CASE("dpx plot busbw draws the limit dpx collective states: the simulated network's rate") {
  require_gnuplot();
  dpx::testing::TempDir dir("plot_limit");
  DpxResult c = run_dpx("collective -b 1K -e 16K -f 4 -n 2 -w 1 --net-sim 1gbit,10us --csv " + dir.file("c.csv"));
  CAPTURE(c.output);
  REQUIRE(c.code == 0);
  CHECK(slurp(dir.file("c.csv")).find(",0.125000,net-sim") != std::string::npos);
  DpxResult r = run_dpx("plot " + dir.file("c.csv") + " --out " + dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  check_figure(dir, "figs/busbw-all_reduce", 2, 960, 640);  // ring, and the limit
  CHECK(slurp(dir.file("figs/busbw-all_reduce.svg")).find("limit: --net-sim rate 0.125 GB/s") != std::string::npos);
  // A measured limit (one rank's memcpy, 4.981304 GB/s say) is legended rounded: 4.98; measured
  // at each size, the range.
  DpxResult m = run_dpx("collective -b 1K -e 16K -f 4 -n 2 -w 1 --csv " + dir.file("m.csv"));
  REQUIRE(m.code == 0);
  REQUIRE(run_dpx("plot " + dir.file("m.csv") + " --out " + dir.file("mem")).code == 0);
  CHECK(std::regex_search(slurp(dir.file("mem/busbw-all_reduce.svg")),
                          std::regex("limit: one rank's memcpy [0-9.]+-[0-9.]+ GB/s by size")));
  // A limit of each size, far above the busbw measured (copies inside the caches), is drawn through
  // the sizes, and leaves the plot at twice the best busbw, which the caption says.
  const std::string head =
      "collective,algo,backend,ranks,bytes,count,dtype,op,root,placement,time_us,algbw_gbs,busbw_gbs,wrong,nodes,"
      "limit_gbs,limit_source\n";
  std::ofstream(dir.file("k.csv")) << head << "all_reduce,ring,threads,2,1024,256,float,sum,-1,out,1,1,1.5,0,1,40,memcpy\n"
                                              "all_reduce,ring,threads,2,4096,1024,float,sum,-1,out,1,4,3,0,1,4.5,memcpy\n";
  DpxResult k = run_dpx("plot " + dir.file("k.csv") + " --out " + dir.file("kfig"));
  CAPTURE(k.output);
  REQUIRE(k.code == 0);
  check_figure(dir, "kfig/busbw-all_reduce", 2, 960, 640);
  CHECK(slurp(dir.file("kfig/busbw-all_reduce.svg")).find("limit: one rank's memcpy 4.5-40 GB/s by size") !=
        std::string::npos);
  CHECK(slurp(dir.file("kfig/busbw-all_reduce.txt")).find("(above the plot where over twice the best busbw)") !=
        std::string::npos);
}

// Every axis a sweep varies names its series (issue: four bars all labelled "2" for four bucket
// sizes): distinct legend entries for distinct configurations, the ideal-scaling line in the
// legend once, and --where selecting rows by any results.csv column.
TEST_CASE("dpx plot: an algorithm and bucket sweep gets a series per configuration; --where selects") {
  require_gnuplot();
  dpx::testing::TempDir dir("plot_axes");
  const std::string bench = small_bench(dir, "bench", "--algo ring,tree --bucket-mb 0.1,25");
  DpxResult r = run_dpx("plot " + bench + " --figure throughput,phases --out " + dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const std::string svg = slurp(dir.file("figs/throughput.svg"));
  for (const char* label : {"lenet5 batch 8/rank ring bucket 0.1 MiB", "lenet5 batch 8/rank ring bucket 25 MiB",
                            "lenet5 batch 8/rank tree bucket 0.1 MiB", "lenet5 batch 8/rank tree bucket 25 MiB",
                            "dashed: ideal scaling"}) {
    CAPTURE(label);
    CHECK(svg.find(label) != std::string::npos);
  }
  // A phases figure per configuration, each titled with it: none of them mixes two.
  for (const char* stem : {"phases-lenet5-b8-algoring-bucket_mb0.1", "phases-lenet5-b8-algoring-bucket_mb25",
                           "phases-lenet5-b8-algotree-bucket_mb0.1", "phases-lenet5-b8-algotree-bucket_mb25"}) {
    CAPTURE(stem);
    REQUIRE(std::filesystem::exists(dir.file(std::string("figs/") + stem + ".svg")));
  }
  CHECK(slurp(dir.file("figs/phases-lenet5-b8-algotree-bucket_mb25.svg")).find("tree bucket 25 MiB") != std::string::npos);
  // The caption's first clause (the command, long here) wraps onto lines: none of it is cut.
  const std::string caption = slurp(dir.file("figs/throughput.txt"));  // "throughput: data: ...; ..."
  const std::string first = caption.substr(caption.find("data: "), caption.find(';') - caption.find("data: "));
  REQUIRE(first.size() > 105);  // longer than a line
  CHECK(svg.find(first) == std::string::npos);  // not one line running off the figure
  std::istringstream words(first);
  for (std::string word; words >> word;) {
    CAPTURE(word);
    CHECK(svg.find(word) != std::string::npos);
  }

  // --where: the rows of one algorithm and bucket size (25 and 25.0 alike); the label names no
  // axis that no longer varies; the loss figures, whose steps files name no configuration, are left out.
  DpxResult w = run_dpx("plot " + bench + " --where algo=tree --where bucket_mb=25.0 --out " + dir.file("where"));
  CAPTURE(w.output);
  REQUIRE(w.code == 0);
  check_figure(dir, "where/throughput", 3, 960, 640);  // the line, its ideal, the ideal's legend entry
  CHECK(slurp(dir.file("where/throughput.svg")).find("lenet5 batch 8/rank") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.file("where/loss.svg")));
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : {Case{"--where algo=nccl", "no row of"}, Case{"--where algo", "give AXIS=VALUE"},
                        Case{"--where colour=red", "has no column colour (its sweep axes: model"}}) {
    CAPTURE(c.args);
    DpxResult e = run_dpx("plot " + bench + " " + c.args + " --out " + dir.file("bad"));
    CHECK(e.code == 2);
    CHECK(e.output.find(c.expect) != std::string::npos);
    CHECK(!std::filesystem::exists(dir.file("bad")));
  }
}

// dpx plot draws a dpx predict --csv file (it once said "no column batch_size"): throughput and
// efficiency against ranks, a line per batch, and the measured points predict --compare added.
TEST_CASE("dpx plot prediction: dpx predict's CSV, predicted lines and measured points") {
  require_gnuplot();
  dpx::testing::TempDir dir("plot_predict");
  std::ofstream(dir.file("p.csv"))
      << "model,algo,scaling,batch,ranks,rank_batch,compute_s,comm_s,exposed_s,step_s,images_per_s,speedup,efficiency,"
         "measured_step_s,error\n"
         "lenet5,ring,weak,16,1,16,0.005,0,0,0.005,3200,1,1,,\n"
         "lenet5,ring,weak,16,2,16,0.005,0.001,0.0008,0.0058,5517,1.72,0.86,0.006,-0.03\n"
         "lenet5,ring,weak,16,4,16,0.005,0.002,0.0015,0.0065,9846,3.08,0.77,,\n"
         "lenet5,ring,weak,64,1,64,0.02,0,0,0.02,3200,1,1,,\n"
         "lenet5,ring,weak,64,2,64,0.02,0.001,0.0002,0.0202,6337,1.98,0.99,0.021,-0.04\n"
         "lenet5,ring,weak,64,4,64,0.02,0.002,0.0004,0.0204,12549,3.92,0.98,,\n";
  DpxResult r = run_dpx("plot " + dir.file("p.csv") + " --out " + dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  // Per batch: the predicted line, its ideal (throughput only) and the measured points; and the
  // ideal's legend entry once.
  check_figure(dir, "figs/prediction-lenet5", 7, 960, 640);
  check_figure(dir, "figs/prediction-efficiency-lenet5", 4, 960, 640);
  const std::string svg = slurp(dir.file("figs/prediction-lenet5.svg"));
  for (const char* label : {"batch 16/rank, predicted", "batch 64/rank, measured (dpx bench)", "Predicted throughput: lenet5, DDP ring"})
    CHECK(svg.find(label) != std::string::npos);
  CHECK(slurp(dir.file("figs/prediction-lenet5.txt")).find("from dpx predict (lenet5, DDP ring, weak scaling)") !=
        std::string::npos);
  // Only the prediction's figures: no bench figure is drawn from it.
  CHECK(!std::filesystem::exists(dir.file("figs/throughput.svg")));
}

// More than six series in one throughput figure crowd it (study devices drew 12 lines with reused
// colours): they become small multiples, a panel per model, each with its own legend.
TEST_CASE("dpx plot throughput: more than six series become a panel per model") {
  require_gnuplot();
  dpx::testing::TempDir dir("plot_panels");
  const std::string out = dir.file("bench");
  DpxResult b = run_dpx("bench --models mlp,lenet5 --batch-sizes 8 --devices cpu:1,2 --dataset synthetic --image-size 28 "
                        "--channels 1 --steps 2 --warmup 1 --algo ring,tree --accumulate 1,2 --out " + out);
  CAPTURE(b.output);
  REQUIRE(b.code == 0);
  DpxResult r = run_dpx("plot " + out + " --figure throughput --out " + dir.file("figs"));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const std::string svg = slurp(dir.file("figs/throughput.svg"));
  // Two panels of four configurations: per panel 4 lines, 4 ideal lines and the ideal's entry.
  CHECK(svg_series(svg) == 2 * (4 + 4 + 1));
  for (const char* text : {">mlp<", ">lenet5<", "mlp batch 8/rank tree acc 2", "lenet5 batch 8/rank ring acc 1"}) {
    CAPTURE(text);
    CHECK(svg.find(text) != std::string::npos);
  }
  CHECK(slurp(dir.file("figs/throughput.txt")).find("a panel per model") != std::string::npos);
  // The loss figure alike: 16 lines (8 configurations on 1 and 2 ranks) of 2 models, a panel per model.
  DpxResult loss = run_dpx("plot " + out + " --figure loss --out " + dir.file("loss"));
  REQUIRE(loss.code == 0);
  const std::string loss_svg = slurp(dir.file("loss/loss.svg"));
  CHECK(svg_series(loss_svg) == 16);
  CHECK(loss_svg.find(">mlp<") != std::string::npos);
  CHECK(loss_svg.find(">lenet5<") != std::string::npos);
  CHECK(slurp(dir.file("loss/loss.txt")).find("a panel per model") != std::string::npos);
  // Bytes per epoch alike: two lines a configuration (formula, counted), 16 in all, a panel per model.
  DpxResult bytes = run_dpx("plot " + out + " --figure bytes-per-epoch --out " + dir.file("bytes"));
  REQUIRE(bytes.code == 0);
  const std::string bytes_svg = slurp(dir.file("bytes/bytes-per-epoch.svg"));
  CHECK(svg_series(bytes_svg) == 16);
  CHECK(bytes_svg.find(">mlp<") != std::string::npos);
  CHECK(bytes_svg.find("lenet5 batch 8/rank tree acc 2: counted") != std::string::npos);
  CHECK(slurp(dir.file("bytes/bytes-per-epoch.txt")).find("a panel per model") != std::string::npos);
  // --by accumulate: a series per accumulation, a panel per model and algorithm (4 panels of 2).
  DpxResult by = run_dpx("plot " + out + " --figure throughput --by accumulate --out " + dir.file("by"));
  CAPTURE(by.output);
  REQUIRE(by.code == 0);
  const std::string by_svg = slurp(dir.file("by/throughput.svg"));
  CHECK(svg_series(by_svg) == 4 * (2 + 2 + 1));
  for (const char* text : {">mlp ring<", ">mlp tree<", ">lenet5 ring<", ">lenet5 tree<", ">acc 1<", ">acc 2<"}) {
    CAPTURE(text);
    CHECK(by_svg.find(text) != std::string::npos);
  }
  CHECK(slurp(dir.file("by/throughput.txt")).find("--by accumulate: a series per value") != std::string::npos);
  // The scaling and bytes-per-epoch figures by the same axis: the same four panels of acc 1 against
  // acc 2, each with ideal scaling's entry (scaling) or a formula and a counted line a series (bytes).
  DpxResult by_all = run_dpx("plot " + out + " --figure scaling,bytes-per-epoch --by accumulate --out " +
                             dir.file("by_all"));
  CAPTURE(by_all.output);
  REQUIRE(by_all.code == 0);
  const std::string scaling_svg = slurp(dir.file("by_all/scaling.svg"));
  CHECK(svg_series(scaling_svg) == 4 * (2 + 1));
  const std::string by_bytes_svg = slurp(dir.file("by_all/bytes-per-epoch.svg"));
  CHECK(svg_series(by_bytes_svg) == 4 * 2 * 2);
  for (const std::string& svg_text : {scaling_svg, by_bytes_svg})
    for (const char* text : {">mlp ring<", ">lenet5 tree<"}) {
      CAPTURE(text);
      CHECK(svg_text.find(text) != std::string::npos);
    }
  CHECK(scaling_svg.find(">acc 2<") != std::string::npos);
  CHECK(scaling_svg.find(">ideal scaling (1)<") != std::string::npos);
  CHECK(by_bytes_svg.find(">acc 1: counted<") != std::string::npos);
  CHECK(slurp(dir.file("by_all/scaling.txt")).find("--by accumulate: a series per value") != std::string::npos);
  DpxResult bad = run_dpx("plot " + out + " --by colour --out " + dir.file("bad"));
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--by colour: not a sweep axis; name one or more of model, batch") != std::string::npos);
  // Six or fewer stay one figure: one model's four.
  DpxResult one = run_dpx("plot " + out + " --figure throughput --where model=mlp --out " + dir.file("one"));
  REQUIRE(one.code == 0);
  CHECK(slurp(dir.file("one/throughput.txt")).find("a panel per model") == std::string::npos);
  CHECK(svg_series(slurp(dir.file("one/throughput.svg"))) == 4 + 4 + 1);
}
