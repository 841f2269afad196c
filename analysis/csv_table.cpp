// Reading a CSV file as dpx writes them (see csv_table.hpp): quoted fields, and errors that name
// the file, the line and the column.
#include "analysis/csv_table.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.hpp"
#include "core/input_files.hpp"

namespace dpx::analysis {

namespace {

// Comma-separated fields; a field in double quotes may hold commas and doubled quotes (core/csv.hpp
// writes them so). An unclosed quote is a damaged line: nullopt.
std::optional<std::vector<std::string>> split(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  size_t i = 0;
  while (true) {
    field.clear();
    if (i < line.size() && line[i] == '"') {
      for (++i;; ++i) {
        if (i >= line.size()) return std::nullopt;
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            ++i;
            continue;
          }
          ++i;
          break;
        }
        field += line[i];
      }
      if (i < line.size() && line[i] != ',') return std::nullopt;  // text after the closing quote
    } else {
      const size_t comma = line.find(',', i);
      field = line.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
      i = comma == std::string::npos ? line.size() : comma;
    }
    fields.push_back(field);
    if (i >= line.size()) break;
    ++i;  // the comma
  }
  return fields;
}

}  // namespace

CsvTable CsvTable::read(const std::string& path, std::string_view flag) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    usage_fail(flag, ": '", path, "' is a folder: name a CSV file in it (dpx bench writes FOLDER/results.csv)");
  // A regular file, of at most 256 MiB (the largest dpx writes of these are a few MiB), before it is
  // opened: a FIFO would block the read, a huge file keep dpx busy for minutes.
  check_input_file(path, flag, 256 * kMiB);
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
    std::optional<std::vector<std::string>> split_line = split(line);
    if (!split_line)
      usage_fail(flag, ": '", path, "' line ", line_no, " has a quoted field that does not close: a damaged or "
                 "hand-edited file");
    std::vector<std::string> fields = std::move(*split_line);
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
