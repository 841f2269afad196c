// `dpx plot`: reads bench results.csv and collective CSV files by column name (other columns
// may come and go), writes one gnuplot script per figure with the data inline, runs gnuplot on
// it and renames the images into place only once every figure has been drawn.
#include "analysis/plot.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "analysis/gnuplot.hpp"
#include "analysis/plot_data.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"

namespace dpx::analysis {

namespace fs = std::filesystem;
using namespace plot;

namespace {

// "" when the inputs hold the figure's data, else what is missing and the run that makes it.
std::string missing_data(std::string_view name, const Inputs& in) {
  // Columns older results.csv files may lack.
  auto lacks = [&](double BenchRow::*field) {
    return !in.bench.empty() && std::all_of(in.bench.begin(), in.bench.end(), [&](const BenchGroup& g) {
      return std::all_of(g.rows.begin(), g.rows.end(), [&](const BenchRow& r) { return std::isnan(r.*field); });
    });
  };
  if (name == "comm-compute" && lacks(&BenchRow::comm_total))
    return "comm-compute needs a results.csv with the column mean_comm_total_s: run the bench again, " +
           std::string(kBenchRun);
  if (name == "bytes-per-epoch" && (lacks(&BenchRow::bytes_per_epoch_formula) || lacks(&BenchRow::bytes_per_epoch_counted)))
    return "bytes-per-epoch needs a results.csv with the columns bytes_per_epoch_formula and bytes_per_epoch_counted: "
           "run the bench again, " + std::string(kBenchRun);
  if (name == "scaling" && !in.bench.empty() &&
      std::none_of(in.bench.begin(), in.bench.end(), [](const BenchGroup& g) { return g.rows.size() >= 2; }))
    return "scaling needs a dpx bench folder with two or more device counts of one configuration: " +
           std::string(kBenchRun);
  if (name == "best-devices" && !in.bench.empty() &&
      std::none_of(in.bench.begin(), in.bench.end(), [](const BenchGroup& g) { return g.rows.size() >= 2; }))
    return "best-devices needs a dpx bench folder with two or more device counts of one model and batch size: " +
           std::string(kBenchRun);
  if (name == "loss" && !in.bench.empty() && in.losses.empty())
    return "loss needs a dpx bench folder with its steps/*.csv (not a results.csv alone): " + std::string(kLossRun);
  if (name == "loss-epoch" &&
      std::none_of(in.losses.begin(), in.losses.end(), [](const LossRun& lr) {
        return std::any_of(lr.series.begin(), lr.series.end(), [](const LossSeries& s) { return s.epochs >= 2; });
      }))
    return "loss-epoch needs a run of 2 or more epochs (a dpx train folder): " + std::string(kEpochRun);
  if (name == "weak-strong" &&
      !(std::any_of(in.bench.begin(), in.bench.end(), [](const BenchGroup& g) { return g.weak && g.rows.size() >= 2; }) &&
        std::any_of(in.bench.begin(), in.bench.end(), [](const BenchGroup& g) { return !g.weak && g.rows.size() >= 2; })))
    return "weak-strong needs a dpx bench folder with weak and strong scaling over two or more device counts: " +
           std::string(kScalingRun);
  if (name == "max-batch" && std::none_of(in.bench.begin(), in.bench.end(), [](const BenchGroup& g) {
        return std::any_of(g.rows.begin(), g.rows.end(), [](const BenchRow& r) { return !std::isnan(r.memory_budget); });
      }))
    return "max-batch needs a dpx bench folder made with --batch-sizes max: " + std::string(kMaxBatchRun);
  if (name == "loading" && loader_families(in).empty())
    return "loading needs a dpx bench folder that swept two or more --workers counts of one model and batch size: " +
           std::string(kLoadingRun);
  if (name == "prediction")
    return in.predictions.empty() ? "prediction needs a dpx predict --csv file among the inputs: dpx predict --model "
                                    "lenet5 --batch-size 16 --ranks 1..64 --link 10gbit,20us --csv p.csv"
                                  : "";
  if (name == "timeline")
    return in.traces.empty() ? "timeline needs a dpx train --trace file among the inputs: " + std::string(kTraceRun) : "";
  if (name == "busbw")
    return in.collectives.empty() ? "busbw needs a dpx collective --csv file among the inputs: " +
                                        std::string(kCollectiveRun)
                                  : "";
  return in.bench.empty() ? std::string(name) + " needs a dpx bench folder among the inputs: " + std::string(kBenchRun)
                          : "";
}

}  // namespace

const std::vector<PlotFigureInfo>& plot_figures() {
  static const std::vector<PlotFigureInfo> figures = {
      {"throughput",
       "images/s against devices, a line per model and batch size, with ideal scaling; with 3 or more repeats the "
       "median's confidence interval as error bars",
       "a dpx bench folder (results.csv), e.g. dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 "
       "--dataset synthetic --out runs/bench; error bars: add --repeat 3 (or more)"},
      {"scaling",
       "scaling efficiency against devices, a line per configuration, with ideal scaling (1) dashed; --by names the "
       "lines, the other axes make panels",
       "a dpx bench folder with two or more device counts, e.g. dpx bench --models lenet5 --batch-sizes 8 --devices "
       "cpu:1,2,4 --dataset synthetic --out runs/bench"},
      {"phases", "step time against devices as stacked phases, one figure per model and batch size",
       "a dpx bench folder (results.csv), e.g. dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 "
       "--dataset synthetic --out runs/bench"},
      {"busbw", "bus bandwidth against message size (log x), a line per algorithm and backend, one figure per "
                "collective",
       "a dpx collective --csv file, e.g. dpx collective --algo all -b 1K -e 64M -f 4 --csv c.csv"},
      {"efficiency", "scaling efficiency and POP load balance, communication and parallel efficiency against ranks",
       "a dpx bench folder (results.csv), e.g. dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 "
       "--dataset synthetic --out runs/bench"},
      {"best-devices",
       "per model against batch size: the throughput-optimal device count and the most devices whose scaling "
       "efficiency is at least --min-efficiency (default 0.8)",
       "a dpx bench folder with two or more device counts, e.g. dpx bench --models lenet5 --batch-sizes 8,32 "
       "--devices cpu:1,2,4 --dataset synthetic --out runs/bench"},
      {"comm-compute",
       "computation (forward + backward) against communication (total and exposed) per step, clustered bars against "
       "devices, one figure per model and batch size",
       "a dpx bench folder (results.csv), e.g. dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 "
       "--dataset synthetic --out runs/bench"},
      {"bytes-per-epoch", "bytes each rank sends per epoch against devices, by formula and counted, per model",
       "a dpx bench folder (results.csv), e.g. dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 "
       "--dataset synthetic --out runs/bench"},
      {"loss",
       "rank 0's training loss against global step, a line per configuration, with --loss-threshold as a dashed line "
       "and the first step below it",
       "a dpx bench folder with its steps/*.csv, e.g. dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2 "
       "--dataset synthetic --loss-threshold 2.3 --out runs/bench"},
      {"loss-epoch",
       "rank 0's training loss against epoch (fractional: epoch + step / its steps), a line per run, with "
       "--loss-threshold dashed",
       "a run of 2 or more epochs: a dpx train --out folder, e.g. dpx train --model lenet5 --dataset synthetic "
       "--synthetic-size 512 --epochs 3 --devices cpu:2 --parallel ddp --out runs/train"},
      {"weak-strong",
       "per model, scaling efficiency against devices under weak scaling (solid) and strong scaling (dashed) side by "
       "side, a line per batch size",
       "a dpx bench folder with --scaling weak,strong, e.g. dpx bench --models lenet5 --batch-sizes 8 --devices "
       "cpu:1,2,4 --scaling weak,strong --dataset synthetic --out runs/bench"},
      {"max-batch",
       "per model, the largest per-rank batch that trained within the memory budget (dpx bench --batch-sizes max), "
       "a bar per device count",
       "a dpx bench folder made with --batch-sizes max, e.g. dpx bench --models lenet5,squeezenet1_1 --batch-sizes max "
       "--memory-budget 1GB --devices cpu:1,2 --dataset synthetic --out runs/bench"},
      {"loading",
       "per model and batch size, against loader workers per rank: the time a step waited for its batch, its forward "
       "+ backward and its exposed communication, a colour per device count",
       "a dpx bench folder that swept --workers on an image folder, e.g. dpx bench --models squeezenet1_1 --dataset "
       "imagefolder --data-dir data --image-size 64 --batch-sizes 16 --devices cpu:1,2 --workers 0,1,2 --out "
       "runs/bench (dpx data make-imagefolder data makes one)"},
      {"prediction",
       "dpx predict's images/s and scaling efficiency against ranks, a line per batch size, with ideal scaling and, "
       "where predict compared with dpx bench (--compare), the measured points",
       "a dpx predict --csv file, e.g. dpx predict --model lenet5 --batch-size 16 --ranks 1..64 --link 10gbit,20us "
       "--csv p.csv"},
      {"timeline",
       "the phases of each rank over time (load, h2d, forward, backward, exposed communication, optimizer, wait), a "
       "row per rank, for the traced steps or --steps a:b",
       "a dpx train --trace file, e.g. dpx train --model lenet5 --dataset synthetic --devices cpu:2 --parallel ddp "
       "--steps 4 --trace t.json"},
  };
  return figures;
}


std::vector<InputFile> input_files(const std::vector<std::string>& paths) {
  std::vector<InputFile> out;
  std::set<std::string> seen;
  for (const std::string& p : paths) {
    std::error_code ec;
    std::string file = p;
    if (fs::is_directory(p, ec)) {
      // A dpx bench folder (results.csv), else a dpx train folder (summary.csv, the same columns).
      file = (fs::path(p) / "results.csv").string();
      if (!fs::exists(file, ec)) file = (fs::path(p) / "summary.csv").string();
      if (!fs::exists(file, ec))
        usage_fail("'", p, "' is a folder without results.csv or summary.csv: name a dpx bench or dpx train --out "
                   "folder, or a CSV file");
    } else if (!fs::exists(p, ec)) {
      usage_fail("'", p, "' does not exist: name a dpx bench --out folder or a dpx collective --csv file");
    }
    const std::string canonical = fs::weakly_canonical(file, ec).string();
    if (seen.insert(canonical.empty() ? file : canonical).second) out.push_back({file, p});
  }
  return out;
}

std::vector<std::string> make_plots(const PlotOptions& o) {
  // Every check before anything is written: the figures named, the inputs, gnuplot.
  std::vector<std::string> wanted = o.figures;
  for (const std::string& w : wanted) {
    bool known = false;
    for (const auto& f : plot_figures()) known = known || f.name == w;
    if (!known) {
      std::string names;
      for (const auto& f : plot_figures()) names += (names.empty() ? "" : ", ") + std::string(f.name);
      usage_fail("--figure: no figure '", w, "': choose from ", names, " (dpx plot --list)");
    }
  }
  if (!(o.min_efficiency > 0 && o.min_efficiency <= 1))
    usage_fail("--min-efficiency ", o.min_efficiency, ": give a scaling efficiency in (0, 1], e.g. 0.8");
  FigureOptions window;
  if (!o.steps.empty()) {
    const size_t colon = o.steps.find(':');
    char* end = nullptr;
    window.first_step = std::strtol(o.steps.c_str(), &end, 10);
    const bool first_ok = colon != std::string::npos && end == o.steps.c_str() + colon && colon > 0;
    const char* b = o.steps.c_str() + colon + 1;
    window.last_step = first_ok ? std::strtol(b, &end, 10) : -1;
    if (!first_ok || end == b || *end != '\0' || window.first_step < 0 || window.last_step < window.first_step)
      usage_fail("--steps '", o.steps, "': give global steps a:b, 0 <= a <= b, e.g. 2:5");
  }
  for (const std::string& a : o.by)
    if (std::find(std::begin(kAxisNames), std::end(kAxisNames), a) == std::end(kAxisNames)) {
      std::string names;
      for (std::string_view n : kAxisNames) names += (names.empty() ? "" : ", ") + std::string(n);
      usage_fail("--by ", a, ": not a sweep axis; name one or more of ", names);
    }
  window.by = o.by;
  const Inputs in = read_inputs(o.inputs, parse_where(o.where));
  if (wanted.empty()) {
    for (const auto& f : plot_figures())
      if (missing_data(f.name, in).empty()) wanted.emplace_back(f.name);
  }
  for (const std::string& w : wanted)
    if (const std::string missing = missing_data(w, in); !missing.empty()) usage_fail(missing);
  const std::string gnuplot = find_executable(o.gnuplot);
  if (gnuplot.empty())
    fail("dpx plot draws with gnuplot, and '", o.gnuplot,
         "' was not found: install the Debian package gnuplot-nox (apt-get install gnuplot-nox), or name it with "
         "--gnuplot PATH");

  std::vector<Figure> figures;
  for (const std::string& w : wanted) {
    std::vector<Figure> add;
    if (w == "throughput") add.push_back(throughput_figure(in, window));
    if (w == "scaling") add.push_back(scaling_figure(in, window));
    if (w == "phases") add = phases_figures(in);
    if (w == "busbw") add = busbw_figures(in);
    if (w == "efficiency") add = efficiency_figures(in);
    if (w == "comm-compute") add = comm_compute_figures(in);
    if (w == "bytes-per-epoch") add.push_back(bytes_per_epoch_figure(in, window));
    if (w == "loss") add = loss_figures(in);
    if (w == "loss-epoch") add = loss_epoch_figures(in);
    if (w == "weak-strong") add = weak_strong_figures(in);
    if (w == "timeline") add = timeline_figures(in, window);
    if (w == "prediction") add = prediction_figures(in);
    if (w == "loading") add = loading_figures(in);
    if (w == "max-batch") add.push_back(max_batch_figure(in));
    if (w == "best-devices") {
      FigureOptions best = window;
      best.min_efficiency = o.min_efficiency;
      add.push_back(best_devices_figure(in, best));
    }
    figures.insert(figures.end(), add.begin(), add.end());
  }

  // dpx report prints each caption under its figure: not drawn into it as well.
  if (!o.caption_in_figure)
    for (Figure& f : figures) f.body = without_caption_label(f.body);
  // Two inputs whose folders or files share a name would give two figures one name.
  std::map<std::string, int> stems;
  for (Figure& f : figures) {
    f.stem = plot::slug(f.stem);  // [A-Za-z0-9._-] only: it names files in a gnuplot script
    if (const int n = ++stems[f.stem]; n > 1) f.stem += "-" + std::to_string(n);
  }

  check_output_dir_path(o.out_dir, "--out");
  const fs::path dir(o.out_dir);
  for (const Figure& f : figures) {
    check_output_file((dir / (f.stem + ".png")).string(), FileKind::figure, "--out", o.force);
    check_output_file((dir / (f.stem + ".svg")).string(), FileKind::figure, "--out", o.force);
    check_output_file((dir / (f.stem + ".txt")).string(), FileKind::caption, "--out", o.force);
  }
  for (const std::string& input : o.inputs)
    for (const Figure& f : figures)
      for (const char* ext : {".png", ".svg", ".txt"})
        check_outputs_distinct({{"--out", (dir / (f.stem + ext)).string()}}, {{"an input", input}});
  ensure_writable_dir(o.out_dir, "--out");
  // gnuplot writes into a scratch folder of its own (mode 0700, a name mkdtemp made up), never
  // into a name in --out that someone could have made a link of beforehand.
  std::string scratch_name = (dir / ".dpx-plot.XXXXXX").string();
  if (::mkdtemp(scratch_name.data()) == nullptr)
    fail("dpx plot: cannot make a scratch folder in ", o.out_dir, " (--out): ", std::strerror(errno));
  const fs::path scratch(scratch_name);
  const ScratchFolder listed(scratch_name);  // removed on a signal too
  auto clean = [&] {
    std::error_code ec;
    fs::remove_all(scratch, ec);
  };
  std::vector<std::string> written;
  try {
    const std::string size = std::to_string(o.width_px) + "," + std::to_string(o.height_px);
    for (const Figure& f : figures) {
      const std::string script = (scratch / (f.stem + ".gp")).string(), log = (scratch / (f.stem + ".log")).string();
      {
        // gnuplot runs in the scratch folder: the outputs are named by their file names alone (a
        // stem is a figure's name and a slug of an input's, [A-Za-z0-9._-] only), never by a path.
        std::ofstream s(script);
        s << "# dpx plot: " << f.stem << "\n" << "set terminal pngcairo size " << size
          << " noenhanced font 'sans,10'\nset output " << gnuplot_quoted(f.stem + ".png") << "\n"
          << f.body << "set terminal svg size " << size
          << " noenhanced font 'sans,10' background '#ffffff'\nset output " << gnuplot_quoted(f.stem + ".svg") << "\n"
          // The body again rather than replot, which redraws only a multiplot's last panel.
          << f.body << "unset output\n";
        if (!s.flush()) fail("dpx plot: cannot write the gnuplot script '", script, "'");
      }
      const int rc = run_gnuplot(gnuplot, script, log, scratch.string());
      const fs::path png = scratch / (f.stem + ".png"), svg = scratch / (f.stem + ".svg");
      std::error_code ec;
      if (rc != 0 || !fs::exists(png, ec) || !fs::exists(svg, ec) || fs::file_size(png, ec) == 0) {
        // gnuplot's own words when it said any; else what is likely wrong.
        std::string said = file_text_of(log);
        while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
        if (said.empty())
          said = rc == 127 ? "it could not be started"
                 : rc == 0 ? "it exited 0 but wrote no PNG and SVG: is it gnuplot 5 with the pngcairo and svg terminals "
                             "(Debian: gnuplot-nox)?"
                           : "it printed nothing: is '" + gnuplot + "' gnuplot? (try '" + gnuplot + " --version')";
        fail("dpx plot: gnuplot (", gnuplot, ") failed drawing ", f.stem, " (exit status ", rc, "): ", said);
      }
    }
    for (const Figure& f : figures) {
      // The caption first: it is what marks the PNG and SVG beside it as dpx plot's.
      write_file_atomic((dir / (f.stem + ".txt")).string(), f.stem + ": " + f.caption + "\n", "--out");
      for (const char* ext : {".png", ".svg"}) {
        const fs::path final = dir / (f.stem + ext);
        if (::rename((scratch / (f.stem + ext)).c_str(), final.c_str()) != 0)
          fail("dpx plot: cannot move ", f.stem, ext, " into ", o.out_dir, " (--out): ", std::strerror(errno));
        written.push_back(final.string());
      }
      written.push_back((dir / (f.stem + ".txt")).string());
    }
  } catch (...) {
    clean();
    throw;
  }
  clean();
  return written;
}

}  // namespace dpx::analysis
