// `dpx plot`: figures from dpx bench folders, dpx collective --csv files and dpx train --trace
// files, drawn by gnuplot as PNG and SVG with a caption sidecar each (analysis/plot.hpp). --list
// names the figures and the runs whose data they need.
#include <iostream>
#include <memory>

#include "analysis/plot.hpp"
#include "tools/commands.hpp"
#include "tools/train_flags.hpp"

namespace dpx::tools {

namespace {

struct PlotFlags {
  analysis::PlotOptions o;
  std::string figures;
  bool list = false;
};

void run(PlotFlags& f) {
  if (f.list) {
    for (const auto& fig : analysis::plot_figures())
      std::cout << fig.name << ": " << fig.description << "\n    needs " << fig.needs << "\n";
    return;
  }
  if (f.o.inputs.empty())
    usage_fail("dpx plot: name at least one dpx bench folder, dpx collective --csv file or dpx train --trace file "
               "(dpx plot --list)");
  f.o.figures.clear();
  std::string name;
  for (char c : f.figures + ",") {
    if (c == ' ') continue;
    if (c != ',') {
      name += c;
    } else if (!name.empty()) {
      f.o.figures.push_back(name);
      name.clear();
    }
  }
  for (const std::string& w : analysis::make_plots(f.o)) std::cout << "wrote " << w << "\n";
}

}  // namespace

void add_plot_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot",
                                 "draw figures (PNG and SVG, with gnuplot) from dpx bench folders, dpx collective "
                                 "--csv files and dpx train --trace files");
  auto f = std::make_shared<PlotFlags>();
  cmd->add_option("inputs", f->o.inputs,
                  "dpx bench --out folders (or their results.csv), dpx collective --csv files, dpx train --trace files");
  cmd->add_option("-o,--out", f->o.out_dir, "folder for NAME.png, NAME.svg and NAME.txt (the caption)")
      ->check(output_path())
      ->capture_default_str();
  cmd->add_flag("--force", f->o.force,
                "replace NAME.png, NAME.svg or NAME.txt files in --out that dpx plot did not write (without it they "
                "are refused and left alone)");
  cmd->add_option("--figure", f->figures,
                  "figures to draw, a comma list (dpx plot --list); default: every figure whose data is present");
  cmd->add_flag("--list", f->list, "name every figure and the data it needs, then stop");
  cmd->add_option("--by", f->o.by,
                  "throughput, scaling and bytes-per-epoch: the sweep axes that name the series (model, batch, "
                  "parallel, scaling, workers, algo, bucket_mb, accumulate, optimizer, grad_dtype); every other axis "
                  "that varies makes a panel per value")
      ->delimiter(',');
  cmd->add_option("--where", f->o.where,
                  "only the bench rows whose results.csv column AXIS holds VALUE: AXIS=VALUE, repeatable (e.g. "
                  "--where algo=ring --where bucket_mb=25); every other axis the sweep varied names its own series");
  cmd->add_option("--steps", f->o.steps, "timeline: the global steps a:b to draw (default: every traced step)");
  cmd->add_option("--min-efficiency", f->o.min_efficiency,
                  "best-devices: the scaling efficiency, in (0, 1], that the most efficient device count keeps")
      ->capture_default_str();
  cmd->add_option("--gnuplot", f->o.gnuplot, "the gnuplot to run: a name on PATH or a path (Debian: gnuplot-nox)")
      ->capture_default_str();
  cmd->add_option("--width", f->o.width_px, "image width (pixels)")->capture_default_str()->check(CLI::Range(200, 8000));
  cmd->add_option("--height", f->o.height_px, "image height (pixels)")->capture_default_str()->check(CLI::Range(150, 8000));
  cmd->callback([f] { run(*f); });
}

}  // namespace dpx::tools
