// `dpx plot`: figures (PNG and SVG, drawn by gnuplot run as a child process) from the files runs
// write: dpx bench folders (results.csv, read by column name; steps/*.csv), dpx collective --csv
// files and dpx train --trace files.
// Each figure gets a title, axis labels with units, a legend, a caption and a sidecar NAME.txt.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dpx::analysis {

// One kind of figure, as `dpx plot --list` names it.
struct PlotFigureInfo {
  std::string_view name;
  std::string_view description;
  std::string_view needs;  // the data it needs and the run that makes it
};
const std::vector<PlotFigureInfo>& plot_figures();

struct PlotOptions {
  std::vector<std::string> inputs;   // bench folders, results.csv files, collective CSV files, trace JSON files
  std::string out_dir = "plots";
  std::vector<std::string> figures;  // empty: every figure whose data is present
  std::string gnuplot = "gnuplot";   // a name looked up on PATH, or a path
  std::string steps;                  // timeline: global steps "a:b" (inclusive); empty: every traced step
  double min_efficiency = 0.8;        // best-devices: the scaling efficiency a device count must keep, (0, 1]
  // --where AXIS=VALUE: only the bench rows whose results.csv column AXIS holds VALUE (numbers
  // compare as numbers: 25 and 25.0 are one bucket size); several must all hold.
  std::vector<std::string> where;
  // --by AXIS[,AXIS]: the axes that name the throughput figure's series; each other axis that
  // varies makes a panel per value (small multiples).
  std::vector<std::string> by;
  int width_px = 960;
  int height_px = 640;
  bool force = false;                 // replace figure files that dpx plot did not write
  bool caption_in_figure = true;      // the caption's first clause under each figure (dpx report: off)
};

// Reads the inputs, draws the figures in a private scratch folder inside out_dir (mkdtemp: a
// fresh name nobody can plant a link under) and renames them into place only when every one was
// drawn; returns the files written. An existing NAME.png, NAME.svg or NAME.txt is replaced only
// when it is dpx plot's (its caption beside it) or with `force`. Throws dpx::UsageError (exit 2)
// naming the file for missing, empty or foreign inputs, figures without their data and files in
// the way, and dpx::Error (exit 1) when gnuplot is missing or fails.
std::vector<std::string> make_plots(const PlotOptions& options);

// The files named on a dpx plot or dpx report command line: a folder stands for its results.csv
// (dpx bench) or summary.csv (dpx train),
// a file named twice (a folder and its results.csv) counts once. Throws dpx::UsageError naming a
// path that does not exist or a folder without results.csv.
struct InputFile {
  std::string file;   // the file to read
  std::string named;  // as the command line named it
};
std::vector<InputFile> input_files(const std::vector<std::string>& paths);

}  // namespace dpx::analysis
