// `dpx report`: reads the inputs as `dpx plot` does (by column name), checks everything before
// writing anything, draws the figures with make_plots into a temporary folder and inlines each
// SVG, its ids prefixed per figure so that two figures' <defs> cannot collide in one page.
#include "analysis/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "analysis/gnuplot.hpp"
#include "analysis/plot.hpp"
#include "analysis/report_sections.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_files.hpp"

namespace dpx::analysis {

namespace fs = std::filesystem;

namespace {

// A file's text, "" when it is absent or not a regular file of at most 64 MiB (a command.txt that
// is a FIFO is never opened).
std::string read_text(const fs::path& path) {
  if (!is_readable_input(path.string(), 64 * kMiB)) return "";
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The SVG element of a file gnuplot wrote, without its XML prolog, every id (and reference to
// one) prefixed with `prefix`.
std::string inline_svg(const std::string& svg, const std::string& prefix, const std::string& path) {
  const size_t start = svg.find("<svg");
  const size_t end = svg.rfind("</svg>");
  if (start == std::string::npos || end == std::string::npos || end < start)
    fail("dpx report: '", path, "' that gnuplot wrote is not an SVG image");
  std::string s = svg.substr(start, end + 6 - start);
  for (std::string_view from : {" id='", " id=\"", "href='#", "href=\"#", "url(#"}) {
    const std::string to = std::string(from) + prefix;
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
  }
  return s;
}

// Runs in the browser only for the render check (tests/tools/test_report_browser.cpp): the page
// shows everything without it. A figure counts as rendered when its <svg> has a box and holds a
// path that was laid out with a size.
constexpr std::string_view kRenderCheck = R"(<script>
(function () {
  var figures = document.querySelectorAll('figure.dpx-figure');
  var rendered = 0;
  figures.forEach(function (f) {
    var svg = f.querySelector('svg');
    if (!svg) return;
    var box = svg.getBBox();
    var drawn = 0;
    svg.querySelectorAll('path').forEach(function (p) {
      var b = p.getBBox();
      if (b.width > 0 || b.height > 0) drawn++;
    });
    if (box.width > 0 && box.height > 0 && drawn > 0) rendered++;
  });
  // The smallest text of any figure as laid out at this window's width, in CSS pixels.
  var smallest = 1e9;
  document.querySelectorAll('figure.dpx-figure svg text').forEach(function (t) {
    if (!t.textContent.trim()) return;
    var h = t.getBoundingClientRect().height;
    if (h > 0) smallest = Math.min(smallest, h);
  });
  // Tables wider than the page (they scroll sideways): none should be, at this window's width.
  var wide = 0;
  document.querySelectorAll('table').forEach(function (t) {
    if (t.scrollWidth > t.clientWidth + 1) wide++;
  });
  var check = document.getElementById('dpx-render-check');
  check.setAttribute('data-figures', String(figures.length));
  check.setAttribute('data-rendered', String(rendered));
  check.setAttribute('data-min-text-px', String(Math.floor(smallest * 10) / 10));
  check.setAttribute('data-wide-tables', String(wide));
  check.textContent = 'render check: ' + rendered + ' of ' + figures.length + ' figures drawn';
})();
</script>
)";

constexpr std::string_view kStyle = R"(<style>
body { font-family: sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; }
pre.command { background: #f4f4f4; padding: 0.6em; white-space: pre-wrap; word-break: break-all; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.85em; display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.4em; text-align: right; }
td { white-space: nowrap; }
table.config td, table.summary td:first-child { white-space: normal; }
td small { color: #555; }
th { background: #eee; }
td:first-child, th:first-child, table.config td, table.config th { text-align: left; }
figure.dpx-figure { margin: 1.5em 0; }
figure.dpx-figure svg { max-width: 100%; height: auto; }
figcaption, p.note { font-size: 0.85em; color: #555; }
#dpx-render-check { display: none; }
ul.summary li { margin: 0.3em 0; }
</style>
)";

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// A folder under the system's temporary folder for the figures, removed with the object.
// A fresh folder of its own in $TMPDIR (mkdtemp: a name nobody chose before, never someone else's
// folder emptied first), removed when the report is done and, listed, on a signal.
struct ScratchDir {
  fs::path path;
  std::unique_ptr<ScratchFolder> listed;
  ScratchDir() {
    std::error_code ec;
    const fs::path tmp = fs::temp_directory_path(ec);
    if (ec)
      fail("dpx report: no folder for its scratch files (TMPDIR: ", ec.message(),
           "): set TMPDIR to a writable folder");
    std::string name = (tmp / "dpx-report.XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr)
      fail("dpx report: cannot make a scratch folder in ", tmp.string(), " (", std::strerror(errno),
           "): set TMPDIR to a writable folder");
    path = name;
    listed = std::make_unique<ScratchFolder>(name);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

// An existing --out file is overwritten only when dpx report wrote it (its marker, near the top).
void check_out_file(const ReportOptions& o) {
  std::error_code ec;
  if (o.out_file.empty()) usage_fail("--out: name the HTML file to write, e.g. --out report.html");
  if (fs::is_directory(o.out_file, ec)) usage_fail("--out: '", o.out_file, "' is a folder: name the HTML file to write");
  std::vector<FlagPath> inputs;
  for (const std::string& in : o.inputs) inputs.push_back({"an input", in});
  check_outputs_distinct({{"--out", o.out_file}}, inputs);
  check_output_file(o.out_file, FileKind::report_html, "--out", o.force);
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

int make_report(const ReportOptions& o) {
  // Every check before anything is written: the inputs, the --out file, gnuplot.
  const std::vector<ReportInput> inputs = read_report_inputs(o.inputs);
  std::vector<std::string> sections;
  std::string summary;
  for (const ReportInput& in : inputs)
    if (in.bench) summary += (inputs.size() > 1 ? "<h3>" + html_escape(in.file) + "</h3>\n" : "") + bench_summary(in);
  for (const ReportInput& in : inputs) {
    std::string s = "<section class=\"input\">\n<h2>" + html_escape(in.file) + "</h2>\n";
    if (in.bench) {
      const fs::path command_file = fs::path(in.file).parent_path() / "command.txt";
      std::string command = read_text(command_file);
      while (!command.empty() && (command.back() == '\n' || command.back() == '\r')) command.pop_back();
      s += command.empty() ? "<p class=\"note\">No command.txt beside it: the command is not recorded.</p>\n"
                           : "<pre class=\"command\">" + html_escape(command) + "</pre>\n";
      s += bench_section(in);
    } else {
      s += "<p class=\"note\">A dpx collective --csv file (the command is not recorded in it).</p>\n";
      s += collective_section(in);
    }
    sections.push_back(s + "</section>\n");
  }
  check_out_file(o);
  if (find_executable(o.gnuplot).empty())
    fail("dpx report draws its figures with gnuplot, and '", o.gnuplot,
         "' was not found: install the Debian package gnuplot-nox (apt-get install gnuplot-nox), or name it with "
         "--gnuplot PATH");

  ScratchDir scratch;
  PlotOptions plot;
  for (const ReportInput& in : inputs) plot.inputs.push_back(in.file);
  plot.out_dir = scratch.path.string();
  plot.gnuplot = o.gnuplot;
  plot.caption_in_figure = false;  // the page prints each caption under its figure, once
  std::vector<std::string> drawn;
  try {
    drawn = make_plots(plot);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    fail("dpx report could not draw its figures: ", e.what());
  }
  std::string figures;
  int count = 0;
  for (const std::string& written : drawn) {
    const fs::path svg(written);
    if (svg.extension() != ".svg") continue;
    const std::string stem = svg.stem().string();
    std::string caption = read_text(fs::path(svg).replace_extension(".txt"));
    if (caption.rfind(stem + ": ", 0) == 0) caption.erase(0, stem.size() + 2);
    while (!caption.empty() && caption.back() == '\n') caption.pop_back();
    ++count;
    figures += "<figure class=\"dpx-figure\" id=\"figure-" + html_escape(stem) + "\">\n" +
               inline_svg(read_text(svg), std::string("f").append(std::to_string(count)).append("-"), written) +
               "\n<figcaption>Figure " + std::to_string(count) + " (" + html_escape(stem) + "): " +
               html_escape(caption) + "</figcaption>\n</figure>\n";
  }

  std::string page = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n" +
                     std::string(kReportGenerator) +
                     "\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
                     html_escape(o.title) + "</title>\n" + std::string(kStyle) + "</head>\n<body>\n<h1>" +
                     html_escape(o.title) + "</h1>\n<p class=\"date\">Written by dpx report on " + utc_now() +
                     " from " + std::to_string(inputs.size()) + (inputs.size() == 1 ? " input" : " inputs") +
                     ".</p>\n";
  if (!o.question.empty()) page += "<p class=\"question\"><strong>The question:</strong> " + html_escape(o.question) + "</p>\n";
  if (!summary.empty()) page += "<h2>What the runs show</h2>\n" + summary;
  for (const auto& s : sections) page += s;
  page += "<h2>Figures</h2>\n" + figures;
  page += "<p id=\"dpx-render-check\" data-figures=\"" + std::to_string(count) +
          "\">render check: not run (it needs JavaScript; the page does not)</p>\n" + std::string(kRenderCheck) +
          "</body>\n</html>\n";
  const fs::path parent = fs::path(o.out_file).parent_path();
  if (!parent.empty()) ensure_writable_dir(parent.string(), "--out");
  write_file_atomic(o.out_file, page, "--out");
  return count;
}

}  // namespace dpx::analysis
