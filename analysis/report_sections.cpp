// `dpx report`'s sections: its inputs read and checked, and per input the HTML of its tables
// (see report_sections.hpp).
#include "analysis/report_sections.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "analysis/fit.hpp"  // size_text
#include "analysis/plot.hpp"  // input_files
#include "analysis/report.hpp"  // html_escape
#include "core/error.hpp"

namespace dpx::analysis {

namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// A cell's text, escaped; a line break in it (a second line such as a confidence interval)
// becomes a second, smaller line in the cell.
std::string cell_html(const std::string& text) {
  const size_t nl = text.find('\n');
  if (nl == std::string::npos) return html_escape(text);
  return html_escape(text.substr(0, nl)) + "<br><small>" + html_escape(text.substr(nl + 1)) + "</small>";
}

// A table: a header row and rows of cells, every cell escaped.
std::string html_table(const std::string& css_class, const std::vector<std::string>& header,
                       const std::vector<std::vector<std::string>>& rows) {
  std::string s = "<table class=\"" + css_class + "\">\n<thead><tr>";
  for (const auto& h : header) s += "<th>" + html_escape(h) + "</th>";
  s += "</tr></thead>\n<tbody>\n";
  for (const auto& r : rows) {
    s += "<tr>";
    for (const auto& c : r) s += "<td>" + cell_html(c) + "</td>";
    s += "</tr>\n";
  }
  return s + "</tbody>\n</table>\n";
}

// The settings of a sweep, in the order a reader looks for them.
constexpr std::string_view kConfigColumns[] = {"model",      "dataset",   "scaling",    "batch_size", "rank_batch",
                                               "devices",    "ranks",     "parallel",   "algo",       "bucket_mb",
                                               "accumulate", "overlap",   "optimizer",  "grad_dtype", "repeats"};

}  // namespace

std::vector<ReportInput> read_report_inputs(const std::vector<std::string>& paths) {
  if (paths.empty()) usage_fail("dpx report: name at least one dpx bench folder or dpx collective --csv file");
  std::vector<ReportInput> out;
  for (const auto& [file, p] : input_files(paths)) {
    CsvTable t = CsvTable::read(file, "dpx report");
    const bool is_coll = t.has("busbw_gbs") && t.has("collective");
    const bool is_bench = t.has("images_per_s") && t.has("ranks") && t.has("model");
    if (!is_coll && !is_bench)
      usage_fail("'", file, "' is neither a dpx bench results.csv nor a dpx collective --csv file (its header: ",
                 t.header().empty() ? std::string() : excerpt(t.header().front()), ",...)");
    if (t.rows() == 0) usage_fail("'", file, "' has a header but no rows: the run that wrote it measured nothing");
    out.push_back({std::move(t), file, p, is_bench});
  }
  return out;
}

std::string bench_section(const ReportInput& in) {
  const CsvTable& t = in.table;
  std::string s;
  // Settings: one value each, or the values it takes; those that vary name the rows below.
  std::vector<std::vector<std::string>> config;
  std::vector<size_t> key_columns;
  for (std::string_view name : kConfigColumns) {
    if (!t.has(name)) continue;
    const size_t c = t.column(name);
    std::vector<std::string> values;
    for (size_t r = 0; r < t.rows(); ++r)
      if (std::find(values.begin(), values.end(), t.text(r, c)) == values.end()) values.push_back(t.text(r, c));
    std::string joined;
    for (const auto& v : values) joined += (joined.empty() ? "" : ", ") + v;
    if (values.size() > 1 && name != "ranks") key_columns.push_back(c);
    config.push_back({std::string(name), joined, values.size() > 1 ? "varies" : "same in every row"});
  }
  if (key_columns.empty()) key_columns = {t.column("model"), t.column("devices")};
  s += "<h3>Configuration</h3>\n" + html_table("config", {"setting", "value", ""}, config);

  // The settings that name the rows, as headers that may wrap ("rank batch", not "rank_batch"):
  // a sweep of five settings still fits the page.
  std::vector<std::string> key_header;
  for (size_t c : key_columns) {
    std::string h = t.header()[c];
    std::replace(h.begin(), h.end(), '_', ' ');
    key_header.push_back(h);
  }
  auto ms = [&](size_t r, std::string_view col) { return fixed(t.number(r, t.column(col)) * 1e3, 3); };
  const bool has_repeats = t.has("repeats") && t.has("images_per_s_ci_lo") && t.has("images_per_s_ci_hi");
  const bool has_noisy = t.has("noisy");
  const bool has_disturbed = t.has("disturbed") && t.has("other_cpu_share");  // dpx from 2026-11-27 on
  std::vector<std::string> phase_header = key_header;
  for (const char* h : {"load + h2d (ms)", "forward (ms)", "backward (ms)", "comm exposed (ms)", "optimizer (ms)",
                        "wait (ms)", "step (ms)", "images/s"})
    phase_header.emplace_back(h);
  if (has_noisy) phase_header.emplace_back("noisy");
  if (has_disturbed) phase_header.emplace_back("others");
  std::vector<std::string> eff_header = key_header;
  for (const char* h : {"speedup", "scaling efficiency", "load balance", "comm efficiency", "parallel efficiency"})
    eff_header.emplace_back(h);
  std::vector<std::vector<std::string>> phases, efficiency;
  size_t disturbed = 0;
  for (size_t r = 0; r < t.rows(); ++r) {
    std::vector<std::string> key;
    for (size_t c : key_columns) key.push_back(t.text(r, c));
    std::vector<std::string> row = key;
    row.push_back(fixed((t.number(r, t.column("mean_load_s")) + t.number(r, t.column("mean_h2d_s"))) * 1e3, 3));
    for (const char* col : {"mean_forward_s", "mean_backward_s", "mean_comm_exposed_s", "mean_optimizer_s",
                            "mean_wait_s", "mean_step_s"})
      row.push_back(ms(r, col));
    std::string ips = fixed(t.number(r, t.column("images_per_s")), 1);
    // A confidence interval means something from three repeats on (dpx bench --repeat).
    if (has_repeats && t.number(r, t.column("repeats")) >= 3 && !t.text(r, t.column("images_per_s_ci_lo")).empty())
      ips += "\n[" + fixed(t.number(r, t.column("images_per_s_ci_lo")), 1) + ", " +
             fixed(t.number(r, t.column("images_per_s_ci_hi")), 1) + "]";
    row.push_back(ips);
    if (has_noisy) row.push_back(t.text(r, t.column("noisy")) == "1" ? "noisy" : "");
    if (has_disturbed) {
      const std::string share = t.text(r, t.column("other_cpu_share"));
      std::string cell = share.empty() ? "" : fixed(100 * t.number(r, t.column("other_cpu_share")), 0) + " %";
      if (t.text(r, t.column("disturbed")) == "1") {
        cell += " disturbed";
        ++disturbed;
      }
      row.push_back(cell);
    }
    phases.push_back(row);
    std::vector<std::string> eff = key;
    for (const char* col : {"speedup", "scaling_efficiency", "load_balance", "comm_efficiency", "parallel_efficiency"})
      eff.push_back(fixed(t.number(r, t.column(col)), 3));
    efficiency.push_back(eff);
  }
  s += "<h3>Phases (mean per step)</h3>\n" + html_table("phases", phase_header, phases);
  s += "<p class=\"note\">comm exposed includes the wait for the slowest rank (docs/measuring.md: Phases).</p>\n";
  if (has_repeats)
    s += "<p class=\"note\">images/s: the median of the repeats, with its confidence interval [lo, hi] where "
         "there are three repeats or more; noisy: the repeats spread more than dpx bench accepts.</p>\n";
  if (has_disturbed) {
    s += "<p class=\"note\">others: the share of a configuration's cores that other processes took during its "
         "measured steps (the most of its repeats); disturbed: above 10 %, its times are the busy machine's.";
    if (disturbed > 0)
      s += " <strong>" + std::to_string(disturbed) + " of " + std::to_string(t.rows()) +
           " configurations ran disturbed</strong>: rerun them on a quiet machine before reading their times.";
    s += "</p>\n";
  }
  s += "<h3>Efficiency</h3>\n" + html_table("efficiency", eff_header, efficiency);
  s += "<p class=\"note\">parallel efficiency = load balance &times; comm efficiency (POP metrics).</p>\n";
  // Peak memory, from results.csv files that have it (dpx before 2026-11-26 did not write it).
  const char* memory_columns[] = {"peak_host_allocated_bytes", "peak_host_reserved_bytes",
                                  "peak_device_allocated_bytes", "peak_device_reserved_bytes"};
  if (std::all_of(std::begin(memory_columns), std::end(memory_columns), [&](const char* c) { return t.has(c); })) {
    bool gpu = false;
    for (size_t r = 0; r < t.rows(); ++r) gpu = gpu || t.number(r, t.column("peak_device_reserved_bytes")) > 0;
    std::vector<std::string> header = key_header;
    for (const char* h : {"host allocated (MB)", "host reserved (MB)"}) header.emplace_back(h);
    if (gpu)
      for (const char* h : {"GPU allocated (MB)", "GPU reserved (MB)"}) header.emplace_back(h);
    std::vector<std::vector<std::string>> rows;
    for (size_t r = 0; r < t.rows(); ++r) {
      std::vector<std::string> row;
      for (size_t c : key_columns) row.push_back(t.text(r, c));
      for (size_t i = 0; i < (gpu ? 4u : 2u); ++i)
        row.push_back(fixed(t.number(r, t.column(memory_columns[i])) / 1e6, 1));
      rows.push_back(row);
    }
    s += "<h3>Peak memory</h3>\n" + html_table("memory", header, rows);
    s += "<p class=\"note\">allocated: the most bytes of live tensors at once (PyTorch's max_memory_allocated); "
         "reserved: the most the allocator held at once, its cache included (max_memory_reserved); the highest of "
         "any rank and repeat. Host figures are a process's: thread ranks share one.</p>\n";
  }
  return s;
}

// What a bench input found, in numbers, for the top of the page: the fastest configuration, the
// scaling efficiency at the most ranks of each series, where communication outweighs the
// computation, and how many configurations were noisy or disturbed.
std::string bench_summary(const ReportInput& in) {
  const CsvTable& t = in.table;
  // A configuration's name: every setting that varies among the rows but the ranks.
  // The batch is the sweep's: per rank under weak scaling, in all under strong (the other one
  // changes with the ranks).
  const bool has_scaling = t.has("scaling");
  auto batch_of = [&](size_t r) {
    const bool weak = has_scaling && t.text(r, t.column("scaling")) == "weak";
    return weak ? "batch " + t.text(r, t.column("rank_batch")) + "/rank" : "batch " + t.text(r, t.column("batch_size"));
  };
  bool batches_vary = false;
  for (size_t r = 1; r < t.rows(); ++r) batches_vary = batches_vary || batch_of(r) != batch_of(0);
  std::vector<size_t> varying;
  for (std::string_view name : kConfigColumns) {
    if (!t.has(name) || name == "ranks" || name == "devices" || name == "batch_size" || name == "rank_batch") continue;
    const size_t c = t.column(name);
    for (size_t r = 1; r < t.rows(); ++r)
      if (t.text(r, c) != t.text(0, c)) {
        varying.push_back(c);
        break;
      }
  }
  auto name_of = [&](size_t r) {
    std::string n;
    for (size_t c : varying) n += (n.empty() ? "" : ", ") + t.header()[c] + " " + t.text(r, c);
    if (batches_vary) n += (n.empty() ? "" : ", ") + batch_of(r);
    return n.empty() ? t.text(r, t.column("model")) + " " + batch_of(r) : n;
  };
  const size_t c_ips = t.column("images_per_s"), c_ranks = t.column("ranks"), c_eff = t.column("scaling_efficiency");
  size_t fastest = 0;
  std::map<std::string, size_t> most_ranks;  // series -> its row with the most ranks
  std::vector<std::string> comm_bound;
  size_t noisy = 0, disturbed = 0;
  for (size_t r = 0; r < t.rows(); ++r) {
    if (t.number(r, c_ips) > t.number(fastest, c_ips)) fastest = r;
    auto [it, added] = most_ranks.emplace(name_of(r), r);
    if (!added && t.number(r, c_ranks) > t.number(it->second, c_ranks)) it->second = r;
    const double compute = t.number(r, t.column("mean_forward_s")) + t.number(r, t.column("mean_backward_s"));
    if (t.number(r, t.column("mean_comm_exposed_s")) > compute)
      comm_bound.push_back(name_of(r) + " at " + t.text(r, c_ranks) + " ranks");
    noisy += t.has("noisy") && t.text(r, t.column("noisy")) == "1";
    disturbed += t.has("disturbed") && t.text(r, t.column("disturbed")) == "1";
  }
  std::string s = "<ul class=\"summary\">\n";
  s += "<li>" + std::to_string(t.rows()) + " configurations measured. Fastest: <strong>" +
       html_escape(name_of(fastest)) + " at " + html_escape(t.text(fastest, c_ranks)) + " ranks, " +
       fixed(t.number(fastest, c_ips), 1) + " images/s</strong>.</li>\n";
  std::vector<std::vector<std::string>> eff;
  for (const auto& [series, r] : most_ranks)
    if (t.number(r, c_ranks) > 1)
      eff.push_back({series, t.text(r, c_ranks), fixed(t.number(r, c_eff), 2), fixed(t.number(r, c_ips), 1)});
  if (!eff.empty())
    s += "<li>Scaling efficiency at the most ranks of each configuration:\n" +
         html_table("summary", {"configuration", "ranks", "scaling efficiency", "images/s"}, eff) + "</li>\n";
  std::string bound;
  for (size_t i = 0; i < comm_bound.size() && i < 8; ++i) bound += (i ? "; " : "") + html_escape(comm_bound[i]);
  if (comm_bound.size() > 8) bound += "; and " + std::to_string(comm_bound.size() - 8) + " more";
  s += "<li>Exposed communication outweighs forward + backward in " +
       (comm_bound.empty() ? std::string("none of them") : std::to_string(comm_bound.size()) + ": " + bound) +
       ".</li>\n";
  s += "<li>Noisy (repeats spread more than dpx bench accepts): " + std::to_string(noisy) + " of " +
       std::to_string(t.rows()) + "; disturbed (other processes took more than 10 % of the cores): " +
       std::to_string(disturbed) + " of " + std::to_string(t.rows()) +
       (noisy + disturbed > 0 ? ": rerun those before reading their times" : "") + ".</li>\n";
  return s + "</ul>\n";
}

// Side by side, as dpx collective prints them: per collective and rank count, a row per size and
// a column per algorithm (and backend, where several), each cell the out-of-place time (us) and
// busbw (GB/s).
std::string collective_section(const ReportInput& in) {
  const CsvTable& t = in.table;
  const size_t c_coll = t.column("collective"), c_algo = t.column("algo"), c_backend = t.column("backend"),
               c_ranks = t.column("ranks"), c_bytes = t.column("bytes"), c_place = t.column("placement"),
               c_time = t.column("time_us"), c_busbw = t.column("busbw_gbs");
  std::set<std::string> backends;
  for (size_t r = 0; r < t.rows(); ++r) backends.insert(t.text(r, c_backend));
  // A table per collective and rank count, in the order met: its columns (algorithms) in the
  // order met, and its cells by size and column.
  struct Table {
    std::string collective, ranks;
    std::vector<std::string> columns;
    std::map<double, std::map<std::string, std::string>> cells;
  };
  std::vector<Table> tables;
  for (size_t r = 0; r < t.rows(); ++r) {
    if (t.text(r, c_place) != "out") continue;  // in-place rows are the same algorithm again
    auto it = std::find_if(tables.begin(), tables.end(), [&](const Table& x) {
      return x.collective == t.text(r, c_coll) && x.ranks == t.text(r, c_ranks);
    });
    Table& table = it != tables.end() ? *it : tables.emplace_back(Table{t.text(r, c_coll), t.text(r, c_ranks), {}, {}});
    const std::string column = t.text(r, c_algo) + (backends.size() > 1 ? " (" + t.text(r, c_backend) + ")" : "");
    if (std::find(table.columns.begin(), table.columns.end(), column) == table.columns.end())
      table.columns.push_back(column);
    table.cells[t.number(r, c_bytes)][column] = fixed(t.number(r, c_time), 1) + " us, " + fixed(t.number(r, c_busbw), 2);
  }
  if (tables.empty())
    usage_fail("'", in.file, "' holds no out-of-place rows (placement out): nothing to report; make one with "
               "dpx collective --algo all -b 1K -e 64M -f 4 --csv c.csv");
  std::string s;
  for (const Table& table : tables) {
    std::vector<std::string> header = {"size"};
    header.insert(header.end(), table.columns.begin(), table.columns.end());
    std::vector<std::vector<std::string>> rows;
    for (const auto& [bytes, by_column] : table.cells) {
      std::vector<std::string> row = {size_text(bytes)};
      for (const std::string& c : table.columns) row.push_back(by_column.count(c) ? by_column.at(c) : "");
      rows.push_back(row);
    }
    s += "<h3>" + html_escape(table.collective) + ", " + html_escape(table.ranks) +
         " ranks: time and busbw (GB/s), out of place</h3>\n" + html_table("bandwidth", header, rows);
  }
  return s;
}

}  // namespace dpx::analysis
