#include "analysis/csv_table.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace dpx::analysis {

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream is(line);
  while (std::getline(is, field, ',')) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

}  // namespace

CsvTable CsvTable::read(const std::string& path, std::string_view flag) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    usage_fail(flag, ": '", path, "' is a folder: name a CSV file in it (dpx bench writes FOLDER/results.csv)");
  std::ifstream in(path, std::ios::binary);
  if (!in) usage_fail(flag, ": cannot read '", path, "': ", std::strerror(errno));
  CsvTable t;
  t.path_ = path;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line.find('\0') != std::string::npos)
      usage_fail(flag, ": '", path, "' line ", line_no, " holds binary data: not a CSV file");
    std::vector<std::string> fields = split(line);
    if (t.header_.empty()) {
      if (line.front() == '{' || line.front() == '[')
        usage_fail(flag, ": '", path, "' is JSON, not a CSV file (a dpx fit file goes to dpx predict --fit)");
      t.header_ = std::move(fields);
      continue;
    }
    if (fields.size() != t.header_.size())
      usage_fail(flag, ": '", path, "' line ", line_no, " has ", fields.size(), " fields, its header ",
                 t.header_.size(), ": a damaged or hand-edited file");
    t.rows_.push_back(std::move(fields));
  }
  if (in.bad()) usage_fail(flag, ": reading '", path, "' failed");
  if (t.header_.empty()) usage_fail(flag, ": '", path, "' is empty");
  return t;
}

bool CsvTable::has(std::string_view column) const {
  for (const std::string& h : header_)
    if (h == column) return true;
  return false;
}

size_t CsvTable::column(std::string_view name) const {
  for (size_t i = 0; i < header_.size(); ++i)
    if (header_[i] == name) return i;
  usage_fail("'", path_, "' has no column '", name, "'");
}

double CsvTable::number(size_t row, size_t col) const {
  const std::string& s = rows_[row][col];
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
    usage_fail("'", path_, "' line ", line_of(row), ": column ", header_[col], " holds '", excerpt(s),
               "', not a finite number");
  return v;
}

}  // namespace dpx::analysis
