// dpx bench's --out: one run per folder (see bench_out.hpp).
#include "tools/bench_out.hpp"

#include <fstream>
#include <ostream>
#include <system_error>

#include "core/error.hpp"
#include "core/output_files.hpp"

namespace fs = std::filesystem;

namespace dpx {

namespace {

// What an earlier run left at the top of the folder, by name and kind.
struct TopFile {
  const char* name;
  FileKind kind;
};
constexpr TopFile kTopFiles[] = {{"results.csv", FileKind::results_csv},
                                 {"runs.csv", FileKind::runs_csv},
                                 {"ops.csv", FileKind::ops_csv},
                                 {"command.txt", FileKind::command_txt}};

// dpx plot's figures of the run: STEM.txt is its caption, STEM.png and STEM.svg its drawings.
bool plot_output(const fs::path& p) {
  const std::string ext = p.extension().string();
  if (ext == ".txt") return written_by_dpx(p.string(), FileKind::caption);
  if (ext == ".png" || ext == ".svg") return written_by_dpx(p.string(), FileKind::figure);
  return false;
}

// The first line of the earlier run's command.txt, for the message.
std::string earlier_command(const std::string& dir) {
  std::ifstream in(dir + "/command.txt");
  std::string line;
  if (!in || !std::getline(in, line) || !written_by_dpx(dir + "/command.txt", FileKind::command_txt)) return "";
  if (line.size() > 200) line = line.substr(0, 200) + " ...";
  return line;
}

}  // namespace

std::vector<fs::path> earlier_bench_files(const std::string& dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const TopFile& f : kTopFiles)
    if (written_by_dpx(dir + "/" + f.name, f.kind)) found.emplace_back(fs::path(dir) / f.name);
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec) && plot_output(entry.path())) found.push_back(entry.path());
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / "steps", ec))
    if (entry.path().extension() == ".csv" && written_by_dpx(entry.path().string(), FileKind::steps_csv))
      found.push_back(entry.path());
  return found;
}

void claim_bench_out(const std::string& dir, bool force, std::ostream& log) {
  const std::vector<fs::path> earlier = earlier_bench_files(dir);
  if (earlier.empty()) return;
  if (!force) {
    const std::string command = earlier_command(dir);
    usage_fail("--out '", dir, "' holds an earlier dpx bench run (", earlier.size(), " of its files",
               command.empty() ? std::string() : ", made by: " + command,
               "); its files would be read as this run's. Name another --out, or pass --force to move that run "
               "aside into ", dir, ".old-N (nothing is deleted)");
  }
  std::error_code ec;
  std::string aside;
  for (int n = 1;; ++n) {
    aside = dir + ".old-" + std::to_string(n);
    if (fs::create_directory(aside, ec)) break;  // made here: no one else's
    if (ec)
      fail("--force: cannot make ", aside, " to move the earlier run of --out '", dir, "' into: ", ec.message(),
           "; move or remove that run yourself");
    if (n >= 1000) fail("--force: ", dir, ".old-1 to .old-1000 all exist; move or remove some of them");
  }
  for (const fs::path& p : earlier) {
    const bool in_steps = p.parent_path().filename() == "steps";
    const fs::path to = fs::path(aside) / (in_steps ? "steps" : "") / p.filename();
    if (in_steps) fs::create_directories(to.parent_path(), ec);
    fs::rename(p, to, ec);
    if (ec)
      fail("--force: cannot move ", p.string(), " to ", to.string(), ": ", ec.message(),
           "; the earlier run's files are split between ", dir, " and ", aside, ": move them yourself");
  }
  log << "--force: moved the earlier run in " << dir << " (" << earlier.size() << " files) to " << aside << "\n";
}

}  // namespace dpx
