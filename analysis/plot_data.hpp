// What `dpx plot` reads from its inputs (analysis/plot_read.cpp), the figures drawn from it
// (analysis/plot_figures.cpp) and the gnuplot script helpers they share. Internal to dpx plot:
// analysis/plot.hpp is the interface.
#pragma once
#include <cmath>
#include <set>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dpx::analysis::plot {

constexpr std::string_view kBenchRun =
    "dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 --dataset synthetic --out runs/bench";
constexpr std::string_view kCollectiveRun = "dpx collective --algo all -b 1K -e 64M -f 4 --csv c.csv";
constexpr std::string_view kLossRun =
    "dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2 --dataset synthetic --loss-threshold 2.3 "
    "--out runs/bench";
constexpr std::string_view kEpochRun =
    "dpx train --model lenet5 --dataset synthetic --synthetic-size 512 --epochs 3 --devices cpu:2 --parallel ddp "
    "--out runs/train";
constexpr std::string_view kScalingRun =
    "dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 --scaling weak,strong --dataset synthetic "
    "--out runs/bench";
constexpr std::string_view kTraceRun =
    "dpx train --model lenet5 --dataset synthetic --devices cpu:2 --parallel ddp --steps 4 --trace t.json";

constexpr std::string_view kLoadingRun =
    "dpx bench --models squeezenet1_1 --dataset imagefolder --data-dir data --image-size 64 --batch-sizes 16 "
    "--devices cpu:1,2 --workers 0,1,2 --out runs/bench (dpx data make-imagefolder data --classes 4 --per-class 100 "
    "makes the folder)";

constexpr std::string_view kMaxBatchRun =
    "dpx bench --models lenet5,squeezenet1_1 --batch-sizes max --memory-budget 1GB --devices cpu:1,2 --dataset "
    "synthetic --out runs/bench";

constexpr double kNone = std::nan("");

// One row of results.csv: medians over the runs when there are repeats.
struct BenchRow {
  double ranks = 0, images_per_s = 0;
  double images_per_s_ci_lo = kNone, images_per_s_ci_hi = kNone;  // NaN below 3 repeats
  double repeats = 1, ci_coverage = kNone;
  double load = 0, forward = 0, backward = 0, comm_total = 0, comm_exposed = 0, optimizer = 0, wait = 0, step = 0;
  double scaling_efficiency = 0, load_balance = 0, comm_efficiency = 0, parallel_efficiency = 0;
  double bytes_per_epoch_formula = 0, bytes_per_epoch_counted = 0;
  double workers = kNone, loader_images_per_worker_s = kNone;  // dpx bench's loader columns
  double rank_batch = 0;
  double memory_budget = kNone;  // --batch-sizes max: the budget its batch was found under
  bool disturbed = false;        // other processes took more than 10 % of its cores (core/cpu_use.hpp)
};

// Rows of one model and batch size (and parallel mode, and folder where there are several).
struct BenchGroup {
  std::string label, slug, source;
  std::string run;       // "data: FILE from dpx bench (models ..., ...)"
  std::string model;     // with the parallel mode and folder where label has them
  double batch = 0;      // the sweep's batch: per rank (weak scaling) or global (strong)
  bool weak = true;
  std::vector<BenchRow> rows;  // by ranks
  std::string base_model;      // model (with the parallel mode and folder), weak and strong alike
  // The group's label and key without its number of loader workers: the groups of one sweep of
  // --workers share it (the loading figure draws them in one).
  std::string loader_family_label, loader_family_key;
  std::string model_name;      // the model alone: crowded figures get a panel per model
  // The group's value of every sweep axis (kAxisNames), as a label says it ("batch 8/rank").
  std::map<std::string, std::string> axes;
};

// The sweep axes `dpx plot --by` names.
inline constexpr std::string_view kAxisNames[] = {"model",     "batch",      "parallel",  "scaling",   "workers",
                                                   "algo",      "bucket_mb",  "accumulate", "optimizer", "grad_dtype"};

struct BusbwSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (bytes, busbw_gbs)
};

struct CollectiveFigure {
  std::string collective, source, key;
  std::string run;  // "data: FILE from dpx collective --csv (...)"
  std::vector<BusbwSeries> series;
  // The runs' busbw limits by what sets them (limit_source), by message size (bytes): the
  // tightest where several runs state one.
  std::map<std::string, std::map<double, double>> limits;
};

// One steps/<tag>.csv of a bench folder: rank 0's loss by global step (the loss dpx bench's
// threshold_step is measured on), and the first step below the threshold (-1: none).
struct LossSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (global_step, loss)
  std::vector<std::pair<double, double>> by_epoch;  // (epoch + step / steps of that epoch, loss)
  int epochs = 0;
  double threshold_step = -1, threshold_loss = 0;
};

struct LossRun {
  std::string source, run;
  double threshold = 0;  // --loss-threshold of the command that made the folder; 0: none
  std::vector<LossSeries> series;
};

// A phase of one rank, from a dpx train --trace file.
struct TraceBox {
  int rank = 0;
  std::string phase;
  double start_ms = 0, end_ms = 0;
  long step = -1;
};

struct Trace {
  std::string source, run;
  int ranks = 0;
  std::vector<TraceBox> boxes;
};

// A dpx predict --csv file: the predicted step of each (batch, ranks), and dpx bench's
// measurement beside it where predict was given --compare.
struct PredictionRow {
  double batch = 0, ranks = 0, rank_batch = 0, images_per_s = 0, efficiency = 0, step_s = 0;
  double measured_step_s = kNone;
};
struct PredictionRun {
  std::string source, run;  // run: "data: FILE from dpx predict (model, algo, scaling)"
  std::string model, algo, scaling;
  std::vector<PredictionRow> rows;
};

struct Inputs {
  std::vector<PredictionRun> predictions;
  std::vector<BenchGroup> bench;
  std::vector<std::string> bench_captions;
  std::vector<CollectiveFigure> collectives;
  std::vector<std::string> collective_captions;
  std::vector<LossRun> losses;
  std::vector<Trace> traces;
};

// --where's conditions on bench rows: (column, value).
using Where = std::vector<std::pair<std::string, std::string>>;
// "AXIS=VALUE" -> (AXIS, VALUE); throws UsageError naming --where.
Where parse_where(const std::vector<std::string>& conditions);

// Reads bench folders, results.csv files, collective CSV files and trace JSON files; throws
// dpx::UsageError naming the file for missing, empty or foreign ones. Bench rows are kept where
// every condition of `where` holds; every other sweep axis that varies among the kept rows (the
// parallel mode, scaling, loader workers, algorithm, bucket size, accumulation, optimizer and
// gradient dtype) names its own series, so that no two configurations share one.
Inputs read_inputs(const std::vector<std::string>& paths, const Where& where = {});

// One figure to draw: its file stem, the gnuplot commands between the terminal and the output,
// and the sidecar caption.
struct Figure {
  std::string stem, body, caption;
};

struct FigureOptions {
  double min_efficiency = 0.8;
  long first_step = -1, last_step = -1;  // --steps a:b of the timeline; -1: every step
  // --by: the axes that name the series of the throughput, scaling and bytes-per-epoch figures;
  // every other axis that varies makes a panel of its own. Empty: every varying axis names the
  // series (a panel per model when crowded).
  std::vector<std::string> by;
};

Figure throughput_figure(const Inputs& in, const FigureOptions& o = {});
// Scaling efficiency against devices, a line per configuration that ran on two or more.
Figure scaling_figure(const Inputs& in, const FigureOptions& o = {});
std::vector<Figure> phases_figures(const Inputs& in);
std::vector<Figure> efficiency_figures(const Inputs& in);
std::vector<Figure> busbw_figures(const Inputs& in);
Figure best_devices_figure(const Inputs& in, const FigureOptions& o);
std::vector<Figure> comm_compute_figures(const Inputs& in);
Figure bytes_per_epoch_figure(const Inputs& in, const FigureOptions& o = {});
std::vector<Figure> loss_figures(const Inputs& in);
std::vector<Figure> loss_epoch_figures(const Inputs& in);
std::vector<Figure> weak_strong_figures(const Inputs& in);
std::vector<Figure> timeline_figures(const Inputs& in, const FigureOptions& o);
// dpx predict --csv: images/s and scaling efficiency against ranks, a line per batch, measured
// points where the CSV has them.
std::vector<Figure> prediction_figures(const Inputs& in);
// The groups of each sweep of loader workers (two or more counts of one model and batch), by
// loader_family_key, in the order of their first group.
std::vector<std::vector<const BenchGroup*>> loader_families(const Inputs& in);
std::vector<Figure> loading_figures(const Inputs& in);
Figure max_batch_figure(const Inputs& in);

// More series than a reader tells apart in one plot: past this many lines of several models, a
// figure becomes small multiples, a panel per model with its own legend and colours.
inline constexpr size_t kMaxSeries = 6;

// Small multiples: each panel's name and its items, the panels in the order met.
template <class T>
using Panels = std::vector<std::pair<std::string, std::vector<T>>>;
template <class T>
void add_to_panel(Panels<T>& panels, const std::string& name, T item) {
  for (auto& [panel, items] : panels)
    if (panel == name) {
      items.push_back(item);
      return;
    }
  panels.push_back({name, {item}});
}
// The gnuplot commands that open a grid of `panels` panels, two to a row, under `title`, room left
// for the caption's lines; each panel's "set title" and plot follow, then "unset multiplot".
std::string multiplot(size_t panels, const std::string& title);
// A panel's legend (`entries` lines at the top, in the 9-point font) above its data rather than
// over it: the top of the panel's autoscaled y range is raised by the legend's share of the
// panel's height (a figure of the default 640 px, `panels` panels two to a row), so no point
// reaches the band the legend takes. Before each panel's plot.
std::string panel_key(size_t entries, size_t panels);
// The n-th series' colour (" lc C") and point shape (" pt P") in a plot: gnuplot's 8 colours in
// turn, then the same colours with the next shape (circle, square, triangle, diamond), so no two
// of 32 series look alike. `hollow`: the open shape of the same family, for a second line of the
// series (bytes-per-epoch's counted line).
std::string series_colour(size_t n);
std::string series_point(size_t n, bool hollow = false);

// Shorter first, so that numbers in text sort as numbers ("8" before "32").
struct ShortFirst {
  bool operator()(const std::string& a, const std::string& b) const {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  }
};
using TextSet = std::set<std::string, ShortFirst>;

std::string join(const TextSet& values, std::string_view sep);
std::string slug(const std::string& s);
std::string fmt(double v);
// `v` to `digits` significant digits, for text a reader reads (legends): 4.98, not 4.981304.
std::string rounded(double v, int digits);
// A gnuplot single-quoted string of any text: a quote is doubled, and each control character
// (a newline would end the string and the command, and gnuplot runs the next line: system(...))
// is written visibly, \n or \xNN (core/quote.hpp). Inside single quotes gnuplot substitutes no
// backquote or @macro, and with `noenhanced` terminals (dpx plot's) no markup either.
std::string gnuplot_quoted(const std::string& s);
// The caption's first clause (the data) in the figure; the whole caption goes to NAME.txt.
std::string caption_label(const std::string& caption);
// `body` without what caption_label added.
std::string without_caption_label(const std::string& body);
std::string datablock(const std::string& name, const std::vector<std::vector<double>>& rows);
// An x axis of devices (ranks), log 2, a tic at each rank count of `groups`.
std::string ranks_axis(const std::vector<BenchGroup>& groups);
// A log-2 axis ('x' or 'y') with a tic at each value.
std::string log2_axis(char axis, const std::set<double>& values);

}  // namespace dpx::analysis::plot
