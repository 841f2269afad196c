// dpx report end to end: careless inputs first (missing, empty, foreign, a foreign --out file:
// exit 2, nothing written or changed; no gnuplot: exit 1), then the page from small real dpx bench
// and dpx collective runs: its marker, no external resource, one inline <svg> per figure dpx plot
// draws, the command and the tables, everything escaped. The browser's view: test_report_browser.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "analysis/csv_table.hpp"
#include "analysis/gnuplot.hpp"
#include "../common/files.hpp"
#include "report_inputs.hpp"
#include "run_dpx.hpp"

namespace {

using dpx::testing::file_text;

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("dpx report refuses missing, empty and foreign inputs with exit 2 and writes nothing") {
  ReportInputs& d = report_inputs();
  dpx::testing::TempDir dir("report_bad");
  const std::string out = dir.file("report.html");
  std::ofstream(dir.file("empty.csv")).close();
  std::ofstream(dir.file("foreign.csv")) << "a,b,c\n1,2,3\n";
  const std::string coll = file_text(d.coll);
  std::ofstream(dir.file("header_only.csv")) << coll.substr(0, coll.find('\n') + 1);
  std::filesystem::create_directories(dir.file("no_results"));
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {dir.file("missing_dir"), "missing_dir"},
      {d.bench + " " + dir.file("missing.csv"), "missing.csv"},
      {dir.file("empty.csv"), "empty.csv"},
      {dir.file("foreign.csv"), "foreign.csv"},
      {dir.file("header_only.csv"), "header_only.csv"},
      {dir.file("no_results"), "without results.csv"},
      {"", "at least one"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    DpxResult r = run_dpx("report " + c.args + " --out " + out);
    CAPTURE(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.expect) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out));
  }
  CHECK(dir.entries().size() == 4);  // the inputs made above, nothing else
}

TEST_CASE("dpx report does not overwrite a file it did not write") {
  ReportInputs& d = report_inputs();
  dpx::testing::TempDir dir("report_foreign_out");
  const std::string out = dir.file("notes.html");
  const std::string mine = "<html><body>my own notes</body></html>\n";
  std::ofstream(out) << mine;
  DpxResult r = run_dpx("report " + d.bench + " --out " + out);
  CAPTURE(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("notes.html") != std::string::npos);
  CHECK(r.output.find("exists and is not a dpx report page: dpx replaces only its own files; name another, or pass --force") != std::string::npos);
  CHECK(file_text(out) == mine);
  CHECK(dir.entries().size() == 1);
  // A folder is no page either.
  DpxResult f = run_dpx("report " + d.bench + " --out " + dir.path.string());
  CAPTURE(f.output);
  CHECK(f.code == 2);
  CHECK(f.output.find("is a folder") != std::string::npos);
}

TEST_CASE("dpx report without gnuplot says which package to install, exit 1, nothing written") {
  ReportInputs& d = report_inputs();
  dpx::testing::TempDir dir("report_nognuplot");
  const std::string out = dir.file("report.html");
  DpxResult r = run_dpx("report " + d.bench + " --gnuplot " + dir.file("no-gnuplot") + " --out " + out);
  CAPTURE(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("gnuplot-nox") != std::string::npos);
  CHECK(dir.entries().empty());
  // A gnuplot that fails: exit 1, the page not written.
  DpxResult f = run_dpx("report " + d.bench + " --gnuplot /bin/false --out " + out);
  CAPTURE(f.output);
  CHECK(f.code == 1);
  CHECK(f.output.find("could not draw its figures") != std::string::npos);
  CHECK(dir.entries().empty());
}

TEST_CASE("dpx report --help describes the page and its flags") {
  DpxResult r = run_dpx("report --help");
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  for (const char* text : {"--out", "--title", "--gnuplot", "gnuplot-nox", "HTML", "command.txt", "inline SVG"})
    CHECK(r.output.find(text) != std::string::npos);
  DpxResult all = run_dpx("--help");
  CHECK(all.output.find("report") != std::string::npos);
}

// Last: without gnuplot it ends the test binary with 77 (ctest: skipped), after the cases above.
TEST_CASE("dpx report writes one self-contained page: tables, and every figure dpx plot draws, inline") {
  if (dpx::analysis::find_executable("gnuplot").empty()) {
    std::printf("skipped: gnuplot is not installed (Debian: apt-get install gnuplot-nox)\n");
    std::fflush(stdout);
    std::_Exit(77);
  }
  ReportInputs& d = report_inputs();
  dpx::testing::TempDir dir("report_page");
  // The figures dpx plot draws from the same inputs: the page must hold each one.
  DpxResult p = run_dpx("plot " + d.bench + " " + d.coll + " --out " + dir.file("figs"));
  CAPTURE(p.output);
  REQUIRE(p.code == 0);
  int plotted = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("figs"))) plotted += e.path().extension() == ".svg";
  // throughput, scaling, phases, efficiency, comm-compute, best-devices, bytes-per-epoch, loss, busbw
  CHECK(plotted == 9);

  const std::string out = dir.file("page/report.html");
  DpxResult r = run_dpx("report " + d.bench + " " + d.coll + " --title 'Study <b> & \"co\"' --question 'Is <i>4</i> > 1?' --out " + out);
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find(std::to_string(plotted) + " figures") != std::string::npos);
  const std::string page = file_text(out);
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.find("<meta name=\"generator\" content=\"dpx report\">") != std::string::npos);
  CHECK(page.find("Study &lt;b&gt; &amp; &quot;co&quot;") != std::string::npos);
  CHECK(page.find("<b>") == std::string::npos);
  // The question under the title, escaped, above the summary of what the runs show.
  const size_t question = page.find("<strong>The question:</strong> Is &lt;i&gt;4&lt;/i&gt; &gt; 1?");
  CHECK(question < page.find("<h2>What the runs show</h2>"));
  CHECK(std::regex_search(page, std::regex(R"(Written by dpx report on \d{4}-\d\d-\d\d \d\d:\d\d UTC)")));
  // Nothing loaded from elsewhere: no resource reference outside the page, no external script,
  // stylesheet or font.
  CHECK_FALSE(std::regex_search(page, std::regex(R"re((src|href)\s*=\s*['"]?\s*(https?:|//))re", std::regex::icase)));
  CHECK_FALSE(std::regex_search(page, std::regex(R"re(<script[^>]*\bsrc|<link\b|@import|url\(\s*['"]?(https?:|//))re",
                                                 std::regex::icase)));
  // One inline <svg> per figure, each in its <figure> with its caption; no XML prolog inside.
  CHECK(count_of(page, "<svg") == plotted);
  CHECK(count_of(page, "</svg>") == plotted);
  CHECK(count_of(page, "<figure class=\"dpx-figure\"") == plotted);
  CHECK(count_of(page, "<figcaption>") == plotted);
  CHECK(page.find("<?xml") == std::string::npos);
  CHECK(page.find("<p id=\"dpx-render-check\" data-figures=\"" + std::to_string(plotted) + "\"") !=
        std::string::npos);
  for (const char* stem : {"throughput", "phases-lenet5-b8", "efficiency-lenet5-b8", "busbw-all_reduce"})
    CHECK(page.find(std::string("id=\"figure-") + stem + "\"") != std::string::npos);
  // The command that made the bench folder, escaped as text.
  std::string command = file_text(d.bench + "/command.txt");
  command = command.substr(0, command.find('\n'));
  REQUIRE(command.rfind("dpx bench --models lenet5", 0) == 0);
  CHECK(page.find("<pre class=\"command\">" + command + "</pre>") != std::string::npos);
  // The tables: configuration, phases (two rows, cpu:1 and cpu:2), efficiency, bandwidth.
  for (const char* table : {"<table class=\"config\">", "<table class=\"phases\">", "<table class=\"efficiency\">",
                            "<table class=\"bandwidth\">"})
    CHECK(count_of(page, table) == 1);
  for (const char* header : {"<th>step (ms)</th>", "<th>comm exposed (ms)</th>", "<th>images/s</th>", "<th>noisy</th>",
                             "<th>scaling efficiency</th>", "<th>parallel efficiency</th>", "<th>size</th>", "<th>ring</th>",
                             "<td>1 KiB</td>", "time and busbw (GB/s), out of place</h3>",
                             "<td>cpu:2</td>", "<td>ring</td>"})
    CHECK(page.find(header) != std::string::npos);
  // The answer on top: the fastest configuration as results.csv has it, each configuration's
  // efficiency at its most ranks; each caption once (under its figure, not also in it).
  const auto results = dpx::analysis::CsvTable::read(d.bench + "/results.csv", "results.csv");
  size_t fastest = 0;
  for (size_t i = 1; i < results.rows(); ++i)
    if (results.number(i, results.column("images_per_s")) > results.number(fastest, results.column("images_per_s")))
      fastest = i;
  char ips[32];
  std::snprintf(ips, sizeof ips, "%.1f", results.number(fastest, results.column("images_per_s")));
  CHECK(page.find("<h2>What the runs show</h2>") < page.find("<section class=\"input\">"));
  CHECK(page.find(" at " + results.text(fastest, results.column("ranks")) + " ranks, " + ips + " images/s</strong>") !=
        std::string::npos);
  CHECK(count_of(page, "<table class=\"summary\">") == 1);
  CHECK(page.find("Exposed communication outweighs forward + backward in ") != std::string::npos);
  CHECK(count_of(page, "data: " + d.bench) <= plotted);  // the figcaptions; no second copy inside the figures
  // Only the page in its folder: no temporary left beside it.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.file("page")), {}) == 1);

  // A page dpx report wrote is replaced by the next one.
  DpxResult again = run_dpx("report " + d.coll + " --out " + out);
  CAPTURE(again.output);
  CHECK(again.code == 0);
  CHECK(count_of(file_text(out), "<svg") == 1);

  // Three repeats: images/s with its confidence interval, and the noisy column.
  DpxResult b3 = run_dpx("bench --models lenet5 --batch-sizes 8 --devices cpu:1 --dataset synthetic --image-size 28 "
                         "--steps 3 --warmup 1 --repeat 3 --out " + dir.file("bench3"));
  CAPTURE(b3.output);
  REQUIRE(b3.code == 0);
  DpxResult r3 = run_dpx("report " + dir.file("bench3") + " --out " + out);
  CAPTURE(r3.output);
  REQUIRE(r3.code == 0);
  CHECK(std::regex_search(file_text(out), std::regex(R"(<td>[0-9.]+<br><small>\[[0-9.]+, [0-9.]+\]</small></td>)")));
}
