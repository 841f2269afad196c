// `dpx fit`: cost models from measurements (analysis/fit.hpp). Collective CSVs give the
// alpha-beta-gamma model of each collective and algorithm; bench results.csv files give the
// communication overhead against model size. Printed as a table and written as JSON for
// `dpx predict --fit`.
#include <filesystem>
#include <iostream>
#include <memory>

#include "analysis/fit.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"
#include "tools/commands.hpp"

namespace dpx::tools {

namespace {

struct FitFlags {
  std::vector<std::string> files;
  std::string out = "fit.json";
  bool force = false;  // --force: replace an --out file that dpx fit did not write
};

void run(const FitFlags& f) {
  // Never write over a file of the user's: only over one that dpx fit wrote before.
  if (!f.out.empty() && std::filesystem::is_directory(f.out))
    usage_fail("--out: '", f.out, "' is a folder: name a file (e.g. ", f.out, "/fit.json)");
  if (!f.out.empty()) {
    std::vector<FlagPath> inputs;
    for (const std::string& in : f.files) inputs.push_back({"an input", in});
    check_outputs_distinct({{"--out", f.out}}, inputs);
    check_output_file(f.out, FileKind::fit_json, "--out", f.force);
  }
  const analysis::FitResult r = analysis::fit_files(f.files);
  analysis::print_fits(std::cout, r);
  int ok = 0;
  for (const auto& c : r.collectives) ok += c.ok ? 1 : 0;
  for (const auto& o : r.overheads) ok += o.ok ? 1 : 0;
  if (ok == 0) fail("dpx fit: no model could be fitted (the reasons are above); nothing written");
  if (!f.out.empty()) {
    write_file_atomic(f.out, analysis::fit_json(r), "--out");
    std::cout << "# wrote " << f.out << " (" << ok << " fit" << (ok == 1 ? "" : "s") << "; use it with dpx predict --fit "
              << f.out << ")\n";
  }
}

}  // namespace

void add_fit_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("fit",
                                 "fit cost models: alpha-beta-gamma of each collective and algorithm from dpx collective "
                                 "--csv files; communication overhead against model size from dpx bench results.csv");
  auto f = std::make_shared<FitFlags>();
  cmd->add_option("files", f->files, "dpx collective --csv files and/or dpx bench results.csv files")->required();
  cmd->add_option("-o,--out", f->out,
                  "write the fits as JSON here (for dpx predict --fit); an existing file is replaced only if dpx fit "
                  "wrote it; \"\" writes nothing")
      ->capture_default_str();
  cmd->add_flag("--force", f->force, "replace an --out file that dpx fit did not write");
  cmd->callback([f] { run(*f); });
}

}  // namespace dpx::tools
