// dpx report in a real browser: headless Chromium loads the page from the file and dumps the DOM
// after the page's render check ran; every figure must have been laid out with drawn paths. A
// copy of the page with one figure hidden must be counted one short (the check can fail). Exits
// 77 (ctest: skipped) without gnuplot or Chromium (scripts/setup installs it with
// DPX_WITH_BROWSER=1).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "analysis/gnuplot.hpp"
#include "../common/files.hpp"
#include "report_inputs.hpp"
#include "run_dpx.hpp"

namespace {

void skip(const std::string& why) {
  std::printf("skipped: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"})
    if (std::string path = dpx::analysis::find_executable(name); !path.empty()) return path;
  return "";
}

// Chromium's path; skips the test (exit 77) without gnuplot or Chromium.
std::string chromium_or_skip() {
  if (dpx::analysis::find_executable("gnuplot").empty())
    skip("gnuplot is not installed (Debian: apt-get install gnuplot-nox)");
  const std::string chromium = find_chromium();
  if (chromium.empty())
    skip("no chromium, chromium-browser or google-chrome on PATH (DPX_WITH_BROWSER=1 scripts/setup installs it)");
  return chromium;
}

struct RenderCheck {
  int figures = -1, rendered = -1;
  double min_text_px = -1;  // the smallest figure text as laid out, CSS pixels
  int wide_tables = -1;     // tables wider than the page (they scroll sideways)
};

// Loads `page` in headless Chromium (as root in CI: --no-sandbox; killed after 60 s) and reads
// the render check's result from the DOM it dumps.
// The window is 1400 px wide, a laptop's browser.
RenderCheck browse(const std::string& chromium, const std::string& page, const std::string& profile) {
  const std::string cmd = "timeout -k 5 60 " + chromium +
                          " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
                          "--window-size=1400,1000 --user-data-dir=" + profile +
                          " --dump-dom file://" + std::filesystem::absolute(page).string() + " 2>/dev/null";
  DpxResult r = run_command(cmd);
  CAPTURE(cmd);
  CAPTURE(r.output.substr(0, 2000));
  CHECK(r.code == 0);
  std::smatch m;
  RenderCheck c;
  if (std::regex_search(r.output, m,
                        std::regex(R"re(<p id="dpx-render-check" data-figures="(\d+)" data-rendered="(\d+)")re"))) {
    c.figures = std::stoi(m[1]);
    c.rendered = std::stoi(m[2]);
  }
  if (std::regex_search(r.output, m, std::regex(R"re(data-min-text-px="([0-9.]+)")re"))) c.min_text_px = std::stod(m[1]);
  if (std::regex_search(r.output, m, std::regex(R"re(data-wide-tables="(\d+)")re"))) c.wide_tables = std::stoi(m[1]);
  return c;
}

}  // namespace

TEST_CASE("dpx report's figures render in headless Chromium") {
  const std::string chromium = chromium_or_skip();
  ReportInputs& d = report_inputs();
  dpx::testing::TempDir dir("report_browser");
  const std::string out = dir.file("report.html");
  DpxResult r = run_dpx("report " + d.bench + " " + d.coll + " --out " + out);
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const RenderCheck good = browse(chromium, out, dir.file("profile"));
  // throughput, scaling, phases, efficiency, comm-compute, best-devices, bytes-per-epoch, loss, busbw
  CHECK(good.figures == 9);
  CHECK(good.rendered == 9);
  // Readable at the page's width: no figure text under 10 px at 1400 px (it was 7 px once).
  CHECK(good.min_text_px >= 10);
  CHECK(good.wide_tables == 0);
  // The page as a reader sees it: a screenshot at 1400 px, the summary at the top, no check text.
  const std::string shot = dir.file("report.png");
  DpxResult s = run_command("timeout -k 5 60 " + chromium + " --headless --no-sandbox --disable-gpu "
                            "--disable-dev-shm-usage --no-first-run --hide-scrollbars --window-size=1400,1000 "
                            "--user-data-dir=" + dir.file("profile") + " --screenshot=" + shot + " file://" +
                            std::filesystem::absolute(out).string() + " 2>/dev/null");
  CHECK(s.code == 0);
  CHECK(std::filesystem::file_size(shot) > 10000);
  const std::string html = dpx::testing::file_text(out);
  CHECK(html.find("<h2>What the runs show</h2>") < html.find("<section class=\"input\">"));
  CHECK(html.find("#dpx-render-check { display: none; }") != std::string::npos);

  // The same page with its first figure hidden: the check must see one figure not drawn.
  std::string page = dpx::testing::file_text(out);
  const size_t svg = page.find("<svg");
  REQUIRE(svg != std::string::npos);
  page.insert(svg + 4, " style=\"display:none\"");
  const std::string broken = dir.file("broken.html");
  std::ofstream(broken) << page;
  const RenderCheck bad = browse(chromium, broken, dir.file("profile"));
  CHECK(bad.figures == 9);
  CHECK(bad.rendered == 8);
}

// A sweep of five settings with repeats, as `dpx study accumulation --quick` makes: its phases
// table (a column per setting, confidence intervals) fits the page at 1400 px, and the figures
// that become panels (eight series) keep their legends' and captions' text readable. Both
// failed once: the table scrolled sideways, the panels' legends were 9 px high.
TEST_CASE("dpx report of a sweep over several settings fits a 1400 px window") {
  const std::string chromium = chromium_or_skip();
  dpx::testing::TempDir dir("report_browser_sweep");
  DpxResult b = run_dpx("bench --models lenet5,mlp --batch-sizes 8,16 --devices cpu:1,2 --accumulate 1,4 "
                        "--dataset synthetic --image-size 28 --steps 2 --warmup 1 --repeat 3 --no-eval --out " +
                        dir.file("bench"));
  CAPTURE(b.output);
  REQUIRE(b.code == 0);
  const std::string out = dir.file("report.html");
  DpxResult r = run_dpx("report " + dir.file("bench") + " --out " + out);
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  const RenderCheck c = browse(chromium, out, dir.file("profile"));
  CHECK(c.figures > 9);
  CHECK(c.rendered == c.figures);
  CHECK(c.wide_tables == 0);
  CHECK(c.min_text_px >= 10);
}
