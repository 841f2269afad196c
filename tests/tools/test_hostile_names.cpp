// Names and files from others reach gnuplot and the shell only escaped (issue "Safe with anyone's
// files", class 1): a folder or file name, a command.txt, --out or --gnuplot holding a newline,
// either quote, a backslash, $(...), backquotes or ';' is shown as text and never run. Every payload
// tries to create a marker file; the tests fail if one appears. Seen failing before the fix: a
// newline in a bench folder's name ended gnuplot's string and ran system(...), and a quote in
// --gnuplot ended commands.sh's quoting.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/gnuplot.hpp"
#include "analysis/plot_data.hpp"
#include "core/quote.hpp"
#include "run_dpx.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::file_text;
using dpx::testing::TempDir;

namespace {

// Strings that would run `touch MARKER` if they escaped their quoting, in gnuplot or in sh.
std::vector<std::string> payloads(const std::string& marker) {
  return {
      "a\nsystem('touch " + marker + "')\nprint '",
      "b'\nsystem(\"touch " + marker + "\")\n'",
      "c\r\nsystem('touch " + marker + "') #",
      "d'; system('touch " + marker + "'); '",
      "e\\'\nsystem('touch " + marker + "')\n",
      "f$(touch " + marker + ")",
      "g`touch " + marker + "`",
      "h;touch " + marker + ";",
      "i\"$(touch " + marker + ")\"",
      "j@x \x1b[31m \x7f",
  };
}

std::string gnuplot_or_skip() {
  const std::string gp = dpx::analysis::find_executable("gnuplot");
  if (gp.empty()) MESSAGE("gnuplot is not installed (apt-get install gnuplot-nox): its half of the test is skipped");
  return gp;
}

}  // namespace

TEST_CASE("printable and shell_quote: no control character survives printable; sh reads a quoted word back whole") {
  TempDir dir("hostile_quote");
  const std::string marker = dir.file("RAN");
  for (const std::string& p : payloads(marker)) {
    CAPTURE(p);
    const std::string shown = dpx::printable(p);
    for (char c : shown) CHECK_FALSE(dpx::is_control(c));
    // printf's argument is the word itself, exactly, and nothing runs.
    const DpxResult r = run_command("printf '%s' " + dpx::shell_quote(p));
    CHECK(r.code == 0);
    CHECK(r.output == p);
    CHECK_FALSE(fs::exists(marker));
  }
  CHECK(dpx::printable("a\nb\tc\x01") == "a\\nb\\tc\\x01");
  CHECK(dpx::shell_quote("plain/path-1.csv") == "plain/path-1.csv");
  CHECK(dpx::shell_quote("") == "''");
}

TEST_CASE("gnuplot reads a gnuplot_quoted() string back as one string and runs nothing of it") {
  const std::string gp = gnuplot_or_skip();
  if (gp.empty()) return;
  TempDir dir("hostile_gnuplot");
  const std::string marker = dir.file("RAN");
  for (const std::string& p : payloads(marker)) {
    CAPTURE(p);
    const std::string q = dpx::analysis::plot::gnuplot_quoted(p);
    CHECK(q.find('\n') == std::string::npos);
    CHECK(q.find('\r') == std::string::npos);
    const std::string script = dir.file("s.gp"), log = dir.file("s.log");
    std::ofstream(script) << "x = " << q << "\nprint x\nprint 'END'\n";
    const int rc = dpx::analysis::run_gnuplot(gp, script, log, dir.path.string());
    const std::string out = file_text(log);
    CAPTURE(out);
    CHECK(rc == 0);
    CHECK_FALSE(fs::exists(marker));
    // gnuplot printed the text as dpx shows it (control characters written visibly), then END.
    CHECK(out.find(dpx::printable(p)) != std::string::npos);
    CHECK(out.find("END") != std::string::npos);
  }
}

// A file name cannot hold '/': the payloads in names touch a relative RAN, which lands in the
// folder of whichever process would run it (dpx and the tests run in `dir`, gnuplot in --out).
bool ran_anywhere(const std::vector<fs::path>& folders) {
  for (const fs::path& f : folders)
    if (fs::exists(f / "RAN")) return true;
  return false;
}

TEST_CASE("dpx plot of a received bench folder whose name, command.txt and --out carry payloads runs nothing") {
  const std::string gp = gnuplot_or_skip();
  if (gp.empty()) return;
  TempDir dir("hostile_plot");
  const std::string made = dir.file("bench");
  const DpxResult b = run_dpx("bench --models mlp --batch-sizes 8 --devices cpu:1,2 --dataset synthetic --image-size 8 "
                              "--channels 1 --steps 2 --warmup 1 --threads 2 --workers 0 --out " + made);
  CAPTURE(b.output);
  REQUIRE(b.code == 0);
  const std::vector<std::string> names = payloads("RAN");
  // The folder under a hostile name, its command.txt rewritten by "the sender".
  const fs::path received = dir.path / ("run " + names[0]);
  fs::rename(made, received);
  std::ofstream(received / "command.txt") << "dpx bench " << names[1] << "\n";
  const fs::path out = dir.path / ("figs " + names[3]);
  const std::string in_dir = "cd " + dpx::shell_quote(dir.path.string()) + " && " + DPX_BINARY + " ";
  const DpxResult r = run_command(in_dir + "plot " + dpx::shell_quote((received / "results.csv").string()) +
                                  " --out " + dpx::shell_quote(out.string()));
  CAPTURE(r.output);
  CHECK(r.code == 0);
  CHECK_FALSE(ran_anywhere({dir.path, out, received}));
  CHECK(fs::exists(out / "throughput.png"));
  CHECK(fs::exists(out / "throughput.svg"));
  // The caption holds the received command as text.
  CHECK(file_text(out / "throughput.txt").find("from dpx bench b'") != std::string::npos);
  // A title with a payload in dpx report: the page is written, nothing runs.
  const fs::path page = dir.path / "page.html";
  const DpxResult rep = run_command(in_dir + "report " + dpx::shell_quote((received / "results.csv").string()) +
                                    " --title " + dpx::shell_quote(names[2]) + " --out " +
                                    dpx::shell_quote(page.string()));
  CAPTURE(rep.output);
  CHECK(rep.code == 0);
  CHECK_FALSE(ran_anywhere({dir.path, out, received}));
  CHECK(fs::exists(page));
}

TEST_CASE("dpx study's commands.sh quotes every word and keeps its comment one line: run, it runs only dpx") {
  TempDir dir("hostile_study");
  const std::vector<std::string> names = payloads("RAN");
  const fs::path out = dir.path / ("study " + names[0]);
  // A --gnuplot path with a quote and $(...) in its name (a link to gnuplot where there is one:
  // then the plot and report steps, which name it, are written into commands.sh too).
  const std::string gp = dpx::analysis::find_executable("gnuplot");
  const fs::path gnuplot = dir.path / ("gp " + names[5] + " " + names[1].substr(0, 2));
  if (!gp.empty()) fs::create_symlink(gp, gnuplot);
  const std::string in_dir = "cd " + dpx::shell_quote(dir.path.string()) + " && ";
  const DpxResult r = run_command(in_dir + DPX_BINARY + " study collectives --quick --max-devices 2 --out " +
                                  dpx::shell_quote(out.string()) + " --gnuplot " + dpx::shell_quote(gnuplot.string()));
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK_FALSE(ran_anywhere({dir.path, out}));
  const std::string sh = file_text(out / "commands.sh");
  CAPTURE(sh);
  // Every line is the shebang, a comment, `set -e` or a dpx command; a word with a newline is
  // quoted, so a line that starts otherwise is the inside of such a word: it must follow a line
  // whose quote is open. Simplest sufficient check: sh -n parses it, and running it runs only dpx.
  CHECK(sh.rfind("#!/bin/sh\n# dpx study collectives", 0) == 0);
  CHECK(sh.find("\\n") != std::string::npos);  // the comment shows --out's newline as \n
  CHECK(run_command("sh -n " + dpx::shell_quote((out / "commands.sh").string())).code == 0);
  // Run with a dpx that only records its words: nothing else runs, and the words come back whole.
  const fs::path bin = dir.path / "bin";
  dpx::testing::write_executable(bin / "dpx",
                                 "#!/bin/sh\nfor w in \"$@\"; do printf '%s\\n--\\n' \"$w\"; done >> \"$WORDS\"\n");
  const std::string words = dir.file("words.txt");
  const DpxResult run = run_command("cd " + dpx::shell_quote(out.string()) + " && PATH=" +
                                    dpx::shell_quote(bin.string()) + ":/usr/bin:/bin WORDS=" + dpx::shell_quote(words) +
                                    " sh ./commands.sh");
  CAPTURE(run.output);
  CHECK(run.code == 0);
  CHECK_FALSE(ran_anywhere({dir.path, out}));
  const std::string recorded = file_text(words);
  CHECK(recorded.find("all_reduce") != std::string::npos);
  if (!gp.empty()) CHECK(recorded.find(gnuplot.string() + "\n--\n") != std::string::npos);
}
