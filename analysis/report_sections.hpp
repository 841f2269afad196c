// `dpx report`'s inputs and the HTML of each one's section (analysis/report.cpp assembles the
// page): a bench results.csv's command, settings, phases and efficiency tables and the summary at
// the top of the page; a dpx collective CSV's times and busbw side by side, as the terminal
// prints them. Every cell is escaped.
#pragma once
#include <string>
#include <vector>

#include "analysis/csv_table.hpp"

namespace dpx::analysis {

struct ReportInput {
  CsvTable table;
  std::string file;  // the CSV read
  std::string name;  // as the user named it
  bool bench = false;  // a dpx bench results.csv; else a dpx collective --csv file
};

// Bench folders, results.csv files and collective CSV files, read by column name; throws
// dpx::UsageError for none, a foreign CSV or one without rows.
std::vector<ReportInput> read_report_inputs(const std::vector<std::string>& paths);

// A bench input's section: its command, the settings that are the same in every row and those
// that vary, the phases and the efficiencies.
std::string bench_section(const ReportInput& in);
// What a bench input found, for the top of the page (a bulleted list).
std::string bench_summary(const ReportInput& in);
// A collective CSV's out-of-place times and busbw, a table per collective and rank count.
std::string collective_section(const ReportInput& in);

}  // namespace dpx::analysis
