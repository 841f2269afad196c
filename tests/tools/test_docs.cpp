// Docs that stay true: every repository path and every code identifier that README.md and docs/
// write in backticks (and every path in their code blocks) exists in the repository, and every
// source file starts with the comment that says what it holds (docs/CONVENTIONS.md).
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = DPX_SOURCE_DIR;

// The folders of the repository a path in the docs starts with (build/ is made, not kept).
const std::set<std::string> kFolders = {"core",  "kernels",    "layers",  "zoo",  "parallel", "analysis",
                                        "tools", "benchmarks", "scripts", "docs", "tests"};

// Names the docs put in backticks that are another project's, not dpx's: they name no code here.
const std::set<std::string> kForeign = {
    "no_sync",             // PyTorch DDP's context manager
    "bf16_compress_hook",  // PyTorch DDP's communication hook
    "KillWait",            // Slurm's setting
};

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// The top-level folders .gitignore names ("/.deps/", "/build*/"): made here, not kept.
bool ignored_folder(const std::string& rel) {
  static const std::vector<std::string> patterns = [] {
    std::vector<std::string> out{".git"};
    std::ifstream in(fs::path(kRoot) / ".gitignore");
    for (std::string line; std::getline(in, line);)
      if (line.size() > 2 && line.front() == '/' && line.back() == '/') out.push_back(line.substr(1, line.size() - 2));
    return out;
  }();
  for (const std::string& p : patterns) {
    const bool prefix = !p.empty() && p.back() == '*';  // "build*"
    if (prefix ? rel.rfind(p.substr(0, p.size() - 1), 0) == 0 : rel == p) return true;
  }
  return false;
}

// Every file of the repository (relative, with '/'), the .git folder and the ignored ones left out.
const std::vector<std::string>& repository_files() {
  static const std::vector<std::string> files = [] {
    std::vector<std::string> out;
    for (auto it = fs::recursive_directory_iterator(kRoot); it != fs::recursive_directory_iterator(); ++it) {
      const std::string rel = fs::relative(it->path(), kRoot).generic_string();
      if (it->is_directory() && it.depth() == 0 && ignored_folder(rel)) {
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) out.push_back(rel);
    }
    return out;
  }();
  return files;
}

bool is_source(const std::string& rel) {
  for (const char* ext : {".cpp", ".hpp", ".cu", ".def", ".h"})
    if (rel.size() > std::string(ext).size() && rel.compare(rel.size() - std::string(ext).size(), std::string::npos, ext) == 0)
      return true;
  return false;
}

// Every identifier the code spells anywhere (comments included): what a name in the docs must be.
// This file is left out: it names what must not exist.
const std::set<std::string>& code_tokens() {
  static const std::set<std::string> tokens = [] {
    std::set<std::string> out;
    const std::regex word("[A-Za-z_~][A-Za-z0-9_]*");
    for (const std::string& rel : repository_files()) {
      const bool code = is_source(rel) || rel.rfind("scripts/", 0) == 0 || rel.ends_with("CMakeLists.txt") ||
                        rel.ends_with(".py") || rel.ends_with(".sh");
      if (!code || rel == "tests/tools/test_docs.cpp") continue;
      const std::string text = read(kRoot / rel);
      for (auto m = std::sregex_iterator(text.begin(), text.end(), word); m != std::sregex_iterator(); ++m)
        out.insert(m->str());
    }
    return out;
  }();
  return tokens;
}

// "a/{b,c}.cpp" -> "a/b.cpp", "a/c.cpp".
std::vector<std::string> expand_braces(const std::string& s) {
  const size_t open = s.find('{'), close = s.find('}', open);
  if (open == std::string::npos || close == std::string::npos) return {s};
  std::vector<std::string> out;
  std::stringstream alternatives(s.substr(open + 1, close - open - 1));
  for (std::string alt; std::getline(alternatives, alt, ',');)
    for (const std::string& rest : expand_braces(s.substr(close + 1))) out.push_back(s.substr(0, open) + alt + rest);
  return out;
}

// Whether a file or folder of the repository matches `pattern` ('*' within one name).
bool matches_something(const std::string& pattern) {
  std::string re;
  for (char c : pattern) re += c == '*' ? std::string("[^/]*") : std::string(std::strchr(".^$|()[]+?\\", c) ? "\\" : "") + c;
  const std::regex r(re + "(/.*)?");
  for (const std::string& rel : repository_files())
    if (std::regex_match(rel, r)) return true;
  return false;
}

// A path the docs name: it exists (a ctest test's name, tools/test_resume, counts as its file's).
bool path_exists(std::string p) {
  while (!p.empty() && (p.back() == '/' || p.back() == '.' || p.back() == ',')) p.pop_back();
  if (const size_t colon = p.find(':'); colon != std::string::npos) p = p.substr(0, colon);  // file:line
  for (const std::string& alt : expand_braces(p)) {
    const bool found = alt.find('*') != std::string::npos
                           ? matches_something(alt)
                           : fs::exists(kRoot / alt) || fs::exists(kRoot / (alt + ".cpp")) ||
                                 fs::exists(kRoot / "tests" / (alt + ".cpp"));
    if (!found) return false;
  }
  return true;
}

bool looks_like_path(const std::string& s) {
  const size_t slash = s.find('/');
  return slash != std::string::npos && s.find(' ') == std::string::npos && kFolders.count(s.substr(0, slash)) > 0;
}

// What is wrong with one backticked span, or "".
std::string check_span(const std::string& span) {
  if (span.find('<') != std::string::npos && span.find('>') != std::string::npos) return "";  // a placeholder
  if (looks_like_path(span)) return path_exists(span) ? "" : "a path that does not exist";
  static const std::regex bare_file("[A-Za-z0-9_-]+\\.(cpp|hpp|cu|def)"), bare_files("([A-Za-z0-9_-]+)\\.\\*");
  std::smatch m;
  if (std::regex_match(span, bare_file) || std::regex_match(span, m, bare_files)) {
    const std::string stem = m.size() > 1 ? m[1].str() + "." : span;
    for (const std::string& rel : repository_files()) {
      const std::string base = fs::path(rel).filename().string();
      if (m.size() > 1 ? base.rfind(stem, 0) == 0 : base == span) return "";
    }
    return "a file that does not exist";
  }
  std::string name = span.ends_with("()") ? span.substr(0, span.size() - 2) : span;
  static const std::regex identifier("[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_~][A-Za-z0-9_]*)*");
  if (!std::regex_match(name, identifier) || kForeign.count(name)) return "";
  const bool code_like = name.find("::") != std::string::npos || name.find('_') != std::string::npos ||
                         std::any_of(name.begin(), name.end(), [](char c) { return std::isupper(static_cast<unsigned char>(c)); });
  if (!code_like) return "";  // a plain word: a value, a flag's choice
  for (size_t at = 0; at <= name.size();) {
    const size_t end = std::min(name.find("::", at), name.size());
    if (!code_tokens().count(name.substr(at, end - at))) return "a name no code spells";
    at = end + 2;
  }
  return "";
}

// README.md and every page of docs/.
std::vector<std::string> doc_files() {
  std::vector<std::string> docs = {"README.md"};
  for (const std::string& rel : repository_files())
    if (rel.rfind("docs/", 0) == 0 && rel.ends_with(".md")) docs.push_back(rel);
  return docs;
}

// Every problem of one page: "README.md: `parallel/nccl/`: a path that does not exist".
std::vector<std::string> problems_of(const std::string& doc, const std::string& text) {
  std::vector<std::string> out;
  std::string prose;  // the page without its code blocks
  std::istringstream lines(text);
  bool fenced = false;
  static const std::regex path_in_code("(^|[^A-Za-z0-9_/.-])([a-z]+/[A-Za-z0-9_./{},*-]+)");
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("```", 0) == 0) {
      fenced = !fenced;
      continue;
    }
    if (!fenced) {
      prose += line + "\n";
      continue;
    }
    for (auto m = std::sregex_iterator(line.begin(), line.end(), path_in_code); m != std::sregex_iterator(); ++m) {
      const std::string p = (*m)[2].str();
      if (looks_like_path(p) && !path_exists(p)) out.push_back(doc + ": " + p + " (in a code block): a path that does not exist");
    }
  }
  static const std::regex span("`([^`\n]+)`");
  for (auto m = std::sregex_iterator(prose.begin(), prose.end(), span); m != std::sregex_iterator(); ++m)
    if (const std::string why = check_span((*m)[1].str()); !why.empty())
      out.push_back(doc + ": `" + (*m)[1].str() + "`: " + why);
  return out;
}

// GitHub's anchor of a heading: lower case, punctuation and symbols (the docs' are ASCII but for
// dashes and signs) dropped, spaces to '-'.
std::string anchor_of(const std::string& heading) {
  std::string out;
  for (unsigned char c : heading) {
    if (std::isalnum(c) || c == '_' || c == '-') out += static_cast<char>(std::tolower(c));
    else if (c == ' ') out += '-';
  }
  return out;
}

// The anchors of a page's headings (outside code blocks).
std::set<std::string> anchors_of(const std::string& text) {
  std::set<std::string> out;
  std::istringstream lines(text);
  bool fenced = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("```", 0) == 0) fenced = !fenced;
    else if (!fenced && line.rfind('#', 0) == 0 && line.find("# ") != std::string::npos)
      out.insert(anchor_of(line.substr(line.find("# ") + 2)));
  }
  return out;
}

// Every relative link of a page ("[text](target)" and images) that points at no file of the
// repository or at no heading of its page: "docs/a.md: b.md#c: no heading #c in docs/b.md".
std::vector<std::string> broken_links(const std::string& doc, const std::string& text) {
  std::vector<std::string> out;
  static const std::regex link("\\]\\(([^)\\s]+)\\)");
  for (auto m = std::sregex_iterator(text.begin(), text.end(), link); m != std::sregex_iterator(); ++m) {
    const std::string target = (*m)[1].str();
    if (target.find("://") != std::string::npos) continue;
    const size_t hash = target.find('#');
    const std::string file = target.substr(0, hash);
    const fs::path resolved = file.empty() ? fs::path(doc) : (fs::path(doc).parent_path() / file).lexically_normal();
    if (!fs::exists(kRoot / resolved)) {
      out.push_back(doc + ": " + target + ": no file " + resolved.generic_string());
      continue;
    }
    if (hash == std::string::npos) continue;
    if (!anchors_of(read(kRoot / resolved)).count(target.substr(hash + 1)))
      out.push_back(doc + ": " + target + ": no heading " + target.substr(hash) + " in " + resolved.generic_string());
  }
  return out;
}

}  // namespace

TEST_CASE("every path and code identifier that README.md and docs/ write in backticks exists") {
  std::vector<std::string> problems;
  int pages = 0;
  for (const std::string& doc : doc_files()) {
    ++pages;
    for (const std::string& p : problems_of(doc, read(kRoot / doc))) problems.push_back(p);
  }
  CHECK(pages >= 13);  // README.md, the reference's ten pages, docs/ARCHITECTURE.md, docs/CONVENTIONS.md
  for (const std::string& p : problems) MESSAGE(p);
  CHECK(problems.empty());
}

TEST_CASE("the check finds a path that moved, a file and a name that are gone, and passes what exists") {
  const auto problems = problems_of("page", "`parallel/nccl/ddp_cuda.cpp` and `ddp_cuda.cpp` and `CudaDdpSync` "
                                           "and `parallel/train/reducer.hpp` and `Reducer::grad_ready()` and "
                                           "`parallel/comm/algorithms/{ring,tree}.cpp` and `--bucket-mb` and `ring`\n"
                                           "```\nparallel/runtime/watchdog.hpp  parallel/mpi/watchdog.hpp\n```\n");
  REQUIRE(problems.size() == 4);
  CHECK(problems[0].find("parallel/mpi/watchdog.hpp (in a code block)") != std::string::npos);
  CHECK(problems[1].find("`parallel/nccl/ddp_cuda.cpp`: a path") != std::string::npos);
  CHECK(problems[2].find("`ddp_cuda.cpp`: a file") != std::string::npos);
  CHECK(problems[3].find("`CudaDdpSync`: a name no code spells") != std::string::npos);
}

TEST_CASE("every source file starts with the comment that says what it holds") {
  std::vector<std::string> bare;
  for (const std::string& rel : repository_files()) {
    if (!is_source(rel) || rel.find("/corpus/") != std::string::npos) continue;
    std::ifstream in(kRoot / rel);
    std::string first;
    std::getline(in, first);
    if (first.rfind("//", 0) != 0) bare.push_back(rel);
  }
  for (const std::string& rel : bare) MESSAGE(rel, " starts with no comment");
  CHECK(bare.empty());
}

TEST_CASE("every link of README.md and docs/ leads to a file of the repository and a heading of it") {
  std::vector<std::string> problems;
  for (const std::string& doc : doc_files())
    for (const std::string& p : broken_links(doc, read(kRoot / doc))) problems.push_back(p);
  for (const std::string& p : problems) MESSAGE(p);
  CHECK(problems.empty());
}

TEST_CASE("the link check finds a missing page and a missing heading, and passes what exists") {
  const auto problems = broken_links("docs/page.md", "[a](measuring.md#metrics) [b](gone.md) [c](cluster.md#no-such) "
                                                     "[d](../README.md#the-first-five-minutes) [e](https://x.org/#y)");
  REQUIRE(problems.size() == 2);
  CHECK(problems[0] == "docs/page.md: gone.md: no file docs/gone.md");
  CHECK(problems[1] == "docs/page.md: cluster.md#no-such: no heading #no-such in docs/cluster.md");
}

// The README is where a newcomer starts: short, and the index of every page of the reference.
TEST_CASE("README.md is the first five minutes and links every page of docs/") {
  const std::string readme = read(kRoot / "README.md");
  CHECK(std::count(readme.begin(), readme.end(), '\n') < 200);
  for (const std::string& doc : doc_files()) {
    if (doc == "README.md" || doc.rfind("docs/lessons/", 0) == 0) continue;
    CAPTURE(doc);
    CHECK(readme.find("](" + doc + ")") != std::string::npos);
  }
  CHECK(readme.find("](docs/lessons/README.md)") != std::string::npos);
}

// docs/cluster.md's Slurm section shows the job script tests/tools/test_slurm.cpp runs.
TEST_CASE("the job script docs/cluster.md shows is scripts/train.sbatch, line for line") {
  const std::string readme = read(kRoot / "docs" / "cluster.md");
  const std::string script = read(kRoot / "scripts" / "train.sbatch");
  REQUIRE(script.find("#SBATCH --requeue") != std::string::npos);
  CHECK(readme.find("```bash\n" + script + "```") != std::string::npos);  // the whole file, as one block
  std::istringstream lines(script);
  for (std::string line; std::getline(lines, line);) {  // and where not, the first line that differs
    CAPTURE(line);
    CHECK(readme.find(line) != std::string::npos);
  }
}
