// CsvTable reads back what core/csv.hpp writes: a field in double quotes may hold commas and
// doubled quotes (a --devices list such as cuda:0,cuda:0 in summary.csv shifted every later column
// before it was quoted: seen on the H100, 2026-11-26); an unclosed quote is a damaged file.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "analysis/csv_table.hpp"
#include "core/csv.hpp"
#include "core/error.hpp"
#include "tests/common/files.hpp"

using dpx::analysis::CsvTable;
using dpx::testing::TempDir;

namespace {
std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = (dir.path / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}
}  // namespace

TEST_CASE("csv_field quotes only what needs it, and CsvTable reads it back") {
  CHECK(dpx::csv_field("cuda:0") == "cuda:0");
  CHECK(dpx::csv_field("cuda:0,cuda:1") == "\"cuda:0,cuda:1\"");
  CHECK(dpx::csv_field("a\"b") == "\"a\"\"b\"");
  TempDir dir("csv_table");
  const std::string line = "resnet18," + dpx::csv_field("cuda:0,cuda:0") + "," + dpx::csv_field("say \"hi\", twice") +
                           ",,2402.3";
  const CsvTable t = CsvTable::read(write(dir, "a.csv", "model,devices,note,empty,images_per_s\n" + line + "\n"), "--x");
  REQUIRE(t.rows() == 1);
  CHECK(t.text(0, t.column("devices")) == "cuda:0,cuda:0");
  CHECK(t.text(0, t.column("note")) == "say \"hi\", twice");
  CHECK(t.text(0, t.column("empty")).empty());
  CHECK(t.number(0, t.column("images_per_s")) == doctest::Approx(2402.3));
}

TEST_CASE("CsvTable: a trailing empty field counts; a quote that does not close is a damaged line") {
  TempDir dir("csv_table_bad");
  const CsvTable t = CsvTable::read(write(dir, "t.csv", "a,b\n1,\n"), "--x");
  CHECK(t.text(0, 1).empty());
  CHECK_THROWS_WITH_AS(CsvTable::read(write(dir, "u.csv", "a,b\n\"1,2\n"), "--x"),
                       doctest::Contains("line 2 has a quoted field that does not close"), dpx::UsageError);
  CHECK_THROWS_WITH_AS(CsvTable::read(write(dir, "v.csv", "a,b\n\"1\"x,2\n"), "--x"),
                       doctest::Contains("line 2 has a quoted field"), dpx::UsageError);
}
