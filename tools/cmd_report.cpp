// `dpx report`: one self-contained HTML page (tables and inlined SVG figures, no external
// resource) from dpx bench folders and dpx collective --csv files (analysis/report.hpp).
#include <iostream>
#include <memory>

#include "analysis/report.hpp"
#include "tools/commands.hpp"
#include "tools/train_flags.hpp"

namespace dpx::tools {

void add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report",
                                 "write one self-contained HTML page (tables and the dpx plot figures, inlined) from "
                                 "dpx bench folders and dpx collective --csv files");
  auto o = std::make_shared<analysis::ReportOptions>();
  cmd->add_option("inputs", o->inputs, "dpx bench --out folders (or their results.csv) and dpx collective --csv files");
  cmd->add_option("-o,--out", o->out_file,
                  "the HTML file to write (atomically); an existing file is replaced only if dpx report wrote it")
      ->check(output_path())
      ->capture_default_str();
  cmd->add_flag("--force", o->force, "replace an --out file that dpx report did not write");
  cmd->add_option("--title", o->title, "the page's title")->capture_default_str();
  cmd->add_option("--question", o->question,
                  "what the runs were made to answer, shown under the title above the summary of what they show "
                  "(dpx study passes its own)");
  cmd->add_option("--gnuplot", o->gnuplot, "the gnuplot to run: a name on PATH or a path (Debian: gnuplot-nox)")
      ->capture_default_str();
  cmd->footer(
      "The page holds, per input, its command (command.txt), a configuration, a phase and an efficiency table (a "
      "bandwidth table for collective CSVs), then every figure dpx plot draws from the inputs as inline SVG with its "
      "caption (drawn by gnuplot, as dpx plot draws them). It loads nothing from elsewhere: no URL, script, font or "
      "stylesheet outside the file.");
  cmd->callback([o] {
    const int figures = analysis::make_report(*o);
    std::cout << "wrote " << o->out_file << " (" << figures << (figures == 1 ? " figure" : " figures") << ")\n";
  });
}

}  // namespace dpx::tools
