// `dpx report`: one self-contained HTML page for sharing a study as one file: per input its
// command and tables (configuration, phases, efficiency; bandwidth for collective CSVs), then every
// figure `dpx plot` draws from the same inputs, its SVG inlined. No external resource of any kind.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/output_files.hpp"

namespace dpx::analysis {

// The page's marker: a file holding it was written by dpx report and may be overwritten.
inline constexpr std::string_view kReportGenerator = kReportGeneratorTag;

struct ReportOptions {
  std::vector<std::string> inputs;  // bench folders, results.csv files, collective CSV files
  std::string out_file = "report.html";
  std::string title = "dpx report";
  std::string question;  // what the runs were made to answer, shown under the title (empty: none)
  std::string gnuplot = "gnuplot";  // a name looked up on PATH, or a path
  bool force = false;               // replace an --out file that dpx report did not write
};

// Reads the inputs, draws the figures with make_plots into a temporary folder, and writes the
// page atomically to out_file; returns the number of figures inlined. Throws dpx::UsageError
// (exit 2), before anything is written, for missing, empty or foreign inputs and for an out_file
// that exists and was not written by dpx report; dpx::Error (exit 1) when gnuplot is missing or
// fails.
int make_report(const ReportOptions& options);

// `text` with & < > " ' replaced by their HTML entities.
std::string html_escape(std::string_view text);

}  // namespace dpx::analysis
