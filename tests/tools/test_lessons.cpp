// Every lesson of docs/lessons/ runs: each command of its ```sh blocks is run in a fresh folder
// (dpx and vanilla_data_parallel resolved to this build), must succeed, and every file the lesson
// tells the reader to look at (`figures/NAME.png`, `DIR/results.csv`, ...) must exist afterwards.
// Each lesson has its three parts, and the index links every lesson.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/gnuplot.hpp"
#include "../common/files.hpp"
#include "run_dpx.hpp"

namespace fs = std::filesystem;

namespace {


// The lines of the ```sh blocks.
std::vector<std::string> commands_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      inside = !inside && line == "```sh";
      continue;
    }
    if (inside && !line.empty()) out.push_back(line);
  }
  return out;
}

std::vector<fs::path> lessons() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(fs::path(DPX_SOURCE_DIR) / "docs" / "lessons"))
    if (e.path().extension() == ".md" && e.path().filename() != "README.md") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("the lessons: every page has its parts and the index links it") {
  const auto pages = lessons();
  CHECK(pages.size() >= 7);
  const std::string index = dpx::testing::file_text(fs::path(DPX_SOURCE_DIR) / "docs" / "lessons" / "README.md");
  for (const fs::path& p : pages) {
    CAPTURE(p.filename().string());
    const std::string text = dpx::testing::file_text(p);
    std::string link = p.filename().string();  // "(NAME.md)", built so that GCC 12 sees no overlap
    link.insert(link.begin(), '(');
    link.push_back(')');
    CHECK(index.find(link) != std::string::npos);
    for (const char* part : {"## Run it", "## What to look for", "## Think about"})
      CHECK(text.find(part) != std::string::npos);
    CHECK(!commands_of(text).empty());
  }
}

TEST_CASE("the lessons: every command runs, and every file a lesson points at is made") {
  const bool gnuplot = !dpx::analysis::find_executable("gnuplot").empty();
  const fs::path bin = fs::path(DPX_BINARY).parent_path();
  for (const fs::path& p : lessons()) {
    CAPTURE(p.filename().string());
    dpx::testing::TempDir dir("lesson");
    const std::string text = dpx::testing::file_text(p);
    for (std::string cmd : commands_of(text)) {
      CAPTURE(cmd);
      if (cmd.rfind("dpx plot", 0) == 0 && !gnuplot) {
        MESSAGE("gnuplot is not installed: not run: " << cmd);
        continue;
      }
      if (cmd.rfind("dpx ", 0) == 0) {
        cmd.replace(0, 3, DPX_BINARY);
      } else if (cmd.rfind("vanilla_data_parallel ", 0) == 0) {
        if (!fs::exists(bin / "vanilla_data_parallel")) {
          MESSAGE("vanilla_data_parallel is not built (DPX_BUILD_BENCHMARKS=OFF): not run");
          continue;
        }
        cmd.replace(0, std::string("vanilla_data_parallel").size(), (bin / "vanilla_data_parallel").string());
      } else {
        FAIL("a lesson command must start with dpx or vanilla_data_parallel");
      }
      const DpxResult r = run_command("cd '" + dir.path.string() + "' && " + cmd);
      CAPTURE(r.output);
      REQUIRE(r.code == 0);
    }
    // Files named in the lesson as `folder/file.ext`, made by its commands.
    const std::regex named("`([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\\.(png|svg|csv))`");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), named); it != std::sregex_iterator(); ++it) {
      const std::string file = (*it)[1];
      if (file.rfind("figures/", 0) == 0 && !gnuplot) continue;
      if (file.find("benchmarks/") == 0 || file.find("parallel/") == 0) continue;  // sources, not outputs
      CAPTURE(file);
      CHECK(fs::exists(dir.path / file));
    }
  }
}
