// A CSV file as dpx writes them (a header line, then rows of comma-separated fields; a field with
// a comma in it, such as a --devices list, in double quotes: core/csv.hpp), read with errors that
// name the file, the line and the column.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dpx::analysis {

class CsvTable {
 public:
  // Reads `path`; throws dpx::UsageError (naming `flag`) when it is missing, unreadable, empty,
  // or a row has another number of fields than the header.
  static CsvTable read(const std::string& path, std::string_view flag);

  const std::string& path() const { return path_; }
  const std::vector<std::string>& header() const { return header_; }
  size_t rows() const { return rows_.size(); }
  bool has(std::string_view column) const;
  // The column's index; throws dpx::UsageError naming the file and the missing column.
  size_t column(std::string_view name) const;
  const std::string& text(size_t row, size_t col) const { return rows_[row][col]; }
  // The field as a finite number; throws dpx::UsageError naming file, line and column.
  double number(size_t row, size_t col) const;
  int line_of(size_t row) const { return static_cast<int>(row) + 2; }

 private:
  std::string path_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace dpx::analysis
