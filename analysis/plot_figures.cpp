// `dpx plot`'s figures: each a function that turns what the inputs hold into a gnuplot script
// body and a caption (analysis/plot_data.hpp), plus the script helpers they share.
#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <sstream>

#include "analysis/plot_data.hpp"
#include "core/error.hpp"
#include "core/quote.hpp"

namespace dpx::analysis::plot {

std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  return out;
}

std::string join(const std::set<std::string, ShortFirst>& values, std::string_view sep) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : std::string(sep)) + v;
  return out;
}

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

std::string gnuplot_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "''";
    else if (is_control(c)) out += printable(std::string_view(&c, 1));
    else out += c;
  }
  return out + "'";
}

std::string caption_label(const std::string& caption) {
  // The first clause, wrapped at spaces into lines that fit the narrowest figure (--width 640 at
  // gnuplot's 9-point font), never cut: a label per line from the bottom up, the margin to fit.
  constexpr size_t kLine = 100;
  const std::string shown = caption.substr(0, caption.find(';'));
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < shown.size()) {
    size_t end = std::min(shown.size(), at + kLine);
    if (end < shown.size()) {
      const size_t space = shown.rfind(' ', end);
      if (space != std::string::npos && space > at) end = space;
    }
    lines.push_back(shown.substr(at, end - at));
    at = end;
    while (at < shown.size() && shown[at] == ' ') ++at;
  }
  std::string out = "set bmargin " + std::to_string(5 + lines.size()) + "\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    const double y = 0.015 + 0.03 * static_cast<double>(lines.size() - 1 - i);
    out += "set label " + std::to_string(99 - i) + " " + gnuplot_quoted(lines[i]) + " at screen 0.01, screen " +
           fmt(y) + " left font ',9'\n";
  }
  return out;
}

std::string multiplot(size_t panels, const std::string& title) {
  const size_t cols = panels <= 2 ? panels : 2, rows = (panels + cols - 1) / cols;
  return "set multiplot layout " + std::to_string(rows) + "," + std::to_string(cols) + " title " +
         gnuplot_quoted(title) + " margins 0.09, 0.98, 0.2, 0.92 spacing 0.1, 0.17\n";
}

std::string panel_key(size_t entries, size_t panels) {
  // multiplot's grid: 72 % of the figure's height shared by the rows, 17 % of a row between rows.
  const double rows = static_cast<double>((panels + 1) / 2);
  const double panel_px = 640 * 0.72 / (rows + 0.17 * (rows - 1)) - 30;  // less the panel's title
  const double share = std::min(0.6, (14.0 * static_cast<double>(entries) + 16) / panel_px);  // 13 px a line at 9 points, a margin
  return "set key top right font ',9' samplen 2\nset offsets 0, 0, graph " + rounded(share / (1 - share), 3) + ", 0\n";
}

std::string series_colour(size_t n) { return " lc " + std::to_string(n % 8 + 1); }

std::string series_point(size_t n, bool hollow) {
  static constexpr int filled[] = {7, 5, 9, 13}, open[] = {6, 4, 8, 12};
  // Indexed apart: GCC 12 at -O0 with UBSan miscompiled "(hollow ? open : filled)[i]" (the first
  // element for every i; the sanitized suite caught it).
  const size_t shape = n / 8 % 4;
  return " pt " + std::to_string(hollow ? open[shape] : filled[shape]);
}

std::string rounded(double v, int digits) {
  std::ostringstream os;
  os.precision(digits);
  os << v;
  return os.str();
}

std::string without_caption_label(const std::string& body) {
  // caption_label's lines: its bmargin, and labels numbered down from 99 (no figure sets others).
  std::istringstream in(body);
  std::string out, line;
  while (std::getline(in, line))
    if (line.rfind("set bmargin ", 0) != 0 && line.rfind("set label 9", 0) != 0) out += line + "\n";
  return out;
}

std::string datablock(const std::string& name, const std::vector<std::vector<double>>& rows) {
  std::string s = "$" + name + " << EOD\n";
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      if (i) s += ' ';
      s += fmt(r[i]);
    }
    s += "\n";
  }
  return s + "EOD\n";
}

// A log-2 axis with a tic at each value, a little room either side.
std::string log2_axis(char axis, const std::set<double>& values) {
  std::string tics;
  for (double v : values) tics += (tics.empty() ? "" : ", ") + fmt(v);
  const std::string a(1, axis);
  return "set " + a + "range [" + fmt(*values.begin() / 1.4) + ":" + fmt(*values.rbegin() * 1.4) +
         "]\nset logscale " + a + " 2\nset " + a + "tics (" + tics + ")\n";
}

std::string ranks_axis(const std::vector<BenchGroup>& groups) {
  std::set<double> ranks;
  for (const auto& g : groups)
    for (const auto& r : g.rows) ranks.insert(r.ranks);
  return "set xlabel 'devices (ranks)'\n" + log2_axis('x', ranks) + "set grid\n";
}

namespace {

// A group drawn with error bars: every row has the interval of its median (3 repeats or more).
bool has_intervals(const BenchGroup& g) {
  return std::all_of(g.rows.begin(), g.rows.end(), [](const BenchRow& r) {
    return r.repeats >= 3 && !std::isnan(r.images_per_s_ci_lo) && !std::isnan(r.images_per_s_ci_hi) &&
           !std::isnan(r.ci_coverage);
  });
}

// "median of 3 runs, 75 % CI": the level is the interval's exact coverage (ci_coverage).
std::string interval_clause(const std::vector<BenchGroup>& groups) {
  TextSet repeats, levels;
  for (const BenchGroup& g : groups) {
    if (!has_intervals(g)) continue;
    for (const BenchRow& r : g.rows) {
      repeats.insert(fmt(r.repeats));
      levels.insert(fmt(std::round(r.ci_coverage * 1000) / 10));
    }
  }
  if (repeats.empty()) return "";
  return "median of " + join(repeats, "/") + " runs, " + join(levels, "/") + " % CI";
}

}  // namespace

namespace {

// The throughput plot of `groups` (indices into `bench`): their lines, ideal lines, rings around
// disturbed points and the ideal's legend entry; `ringed` says whether a ring was drawn.
std::string throughput_plot(const std::vector<BenchGroup>& bench, const std::vector<size_t>& groups, bool& ringed) {
  std::string b, plot = "plot ";
  bool first_ring = true;
  for (size_t n = 0; n < groups.size(); ++n) {
    const size_t i = groups[n];
    const BenchGroup& g = bench[i];
    const bool bars = has_intervals(g);
    std::vector<std::vector<double>> rows;
    const BenchRow& first = g.rows.front();
    for (const auto& r : g.rows)
      rows.push_back({r.ranks, r.images_per_s, first.images_per_s * r.ranks / first.ranks,
                      bars ? r.images_per_s_ci_lo : 0, bars ? r.images_per_s_ci_hi : 0, r.disturbed ? 1.0 : 0.0});
    const std::string name = "t" + std::to_string(i);
    b += datablock(name, rows);
    const std::string lc = series_colour(n);
    const std::string measured = bars ? " using 1:2:4:5 with yerrorlines lw 2" : " using 1:2 with linespoints lw 2";
    plot += std::string(n ? ", \\\n  " : "") + "$" + name + measured + series_point(n) + lc + " title " +
            gnuplot_quoted(g.label + (bars ? " (median, CI)" : "")) + ", \\\n  $" + name +
            " using 1:3 with lines dt 2" + lc + " notitle";
  }
  // Configurations measured on a busy machine: a hollow ring around their points, in the legend once.
  for (size_t i : groups) {
    if (std::none_of(bench[i].rows.begin(), bench[i].rows.end(), [](const BenchRow& r) { return r.disturbed; }))
      continue;
    plot += ", \\\n  $t" + std::to_string(i) + " using 1:($6 > 0 ? $2 : 1/0) with points pt 6 ps 3 lw 2 lc rgb 'black' " +
            (first_ring ? "title 'disturbed: other processes took > 10 % of its cores'" : "notitle");
    first_ring = false;
    ringed = true;
  }
  // The reference lines in the legend once, outside the data as the legend is.
  plot += ", \\\n  NaN with lines dt 2 lc rgb 'gray40' title 'dashed: ideal scaling (first point x k/k0)'";
  return b + plot + "\n";
}

}  // namespace


namespace {

// The series and panels of a figure that draws `lines` lines a configuration against devices.
// With --by, the axes named label the series and each other axis that varies makes a panel per
// value; without, a series is a configuration (its label names every varying axis), and past
// kMaxSeries lines of several models the figure becomes a panel per model.
struct SeriesLayout {
  std::vector<BenchGroup> groups;  // relabelled by --by
  Panels<size_t> panels;           // indices into groups, by panel
  bool multiples = false;          // a panel each, else one plot of every group
  std::string caption;             // the caption's clause that says which, "" for one plot
};

SeriesLayout series_layout(const std::vector<BenchGroup>& bench, const FigureOptions& o, size_t lines) {
  std::vector<std::string> varying;
  for (std::string_view a : kAxisNames) {
    std::set<std::string> values;
    for (const BenchGroup& g : bench)
      if (auto v = g.axes.find(std::string(a)); v != g.axes.end()) values.insert(v->second);
    if (values.size() > 1) varying.emplace_back(a);
  }
  SeriesLayout l{bench, {}, false, ""};
  for (size_t i = 0; i < l.groups.size(); ++i) {
    BenchGroup& g = l.groups[i];
    if (o.by.empty()) {
      add_to_panel(l.panels, g.model_name, i);
      continue;
    }
    std::string label, panel;
    for (const std::string& a : varying) {
      const std::string v = g.axes.count(a) ? g.axes.at(a) : "";
      std::string& into = std::find(o.by.begin(), o.by.end(), a) != o.by.end() ? label : panel;
      into += (into.empty() ? "" : " ") + v;
    }
    g.label = label.empty() ? g.model_name : label;
    add_to_panel(l.panels, panel, i);
  }
  l.multiples = l.panels.size() > 1 && (!o.by.empty() || lines * bench.size() > kMaxSeries);
  if (l.multiples) {
    std::string by;
    for (const std::string& a : o.by) by += (by.empty() ? "" : ",") + a;
    l.caption = o.by.empty() ? "; a panel per model (more than " + std::to_string(kMaxSeries) +
                                   " lines in one would crowd it)"
                             : "; --by " + by + ": a series per value of it, a panel per value of every other axis "
                                                "that varies";
  }
  return l;
}

// Every group's index: one plot of all of them.
std::vector<size_t> all_of(const std::vector<BenchGroup>& groups) {
  std::vector<size_t> all(groups.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

// A figure of lines against devices as `l` lays them out: one plot of every group, or a panel per
// panel of `l` under one title. `plot_of` draws the series of some groups; a panel's legend has
// `per_group` lines a group and `reference` more (ideal scaling).
Figure lines_figure(const std::string& stem, const std::string& title, const std::string& axes,
                    const std::string& caption, const SeriesLayout& l,
                    const std::function<std::string(const std::vector<size_t>&)>& plot_of, size_t per_group,
                    size_t reference) {
  if (!l.multiples)
    return {stem,
            "set title " + gnuplot_quoted(title) + "\n" + axes + "set key outside right top\n" +
                caption_label(caption) + plot_of(all_of(l.groups)),
            caption};
  std::string b = axes + caption_label(caption) + multiplot(l.panels.size(), title);
  for (const auto& [panel, groups] : l.panels)
    b += "set title " + gnuplot_quoted(panel) + "\n" +
         panel_key(per_group * groups.size() + reference, l.panels.size()) + plot_of(groups);
  return {stem, b + "unset multiplot\n", caption};
}

}  // namespace

Figure throughput_figure(const Inputs& in, const FigureOptions& o) {
  std::string caption = join(TextSet(in.bench_captions.begin(), in.bench_captions.end()), "; ");
  const std::string ci = interval_clause(in.bench);
  if (!ci.empty()) caption += "; points: " + ci + " (error bars, dpx bench --repeat)";
  caption += "; dashed: ideal scaling, each line's first point x k/k0";
  const SeriesLayout l = series_layout(in.bench, o, 1);
  const std::string ylabel = "set ylabel " +
                             gnuplot_quoted("throughput (images/s" + (ci.empty() ? "" : "; " + ci) + ")") +
                             "\nset yrange [0:*]\n";
  bool ringed = false;
  if (!l.multiples) {
    const std::string plot = throughput_plot(l.groups, all_of(l.groups), ringed);
    if (ringed) caption += "; ringed: measured while other processes took more than 10 % of the cores";
    return {"throughput",
            "set title 'Throughput against devices'\n" + ranks_axis(in.bench) + ylabel + "set key outside right top\n" +
                caption_label(caption) + plot,
            caption};
  }
  // A panel per model (or per value of the axes --by leaves), in a grid; the caption and the
  // figure's title once for all of them.
  std::string body;
  for (const auto& [panel, groups] : l.panels) {
    const bool disturbed = std::any_of(groups.begin(), groups.end(), [&](size_t i) {
      return std::any_of(l.groups[i].rows.begin(), l.groups[i].rows.end(), [](const BenchRow& r) { return r.disturbed; });
    });
    body += "set title " + gnuplot_quoted(panel) + "\n" +
            panel_key(groups.size() + 1 + (disturbed ? 1 : 0), l.panels.size()) + throughput_plot(l.groups, groups, ringed);
  }
  caption += l.caption;
  if (ringed) caption += "; ringed: measured while other processes took more than 10 % of the cores";
  return {"throughput",
          ranks_axis(in.bench) + ylabel + caption_label(caption) +
              multiplot(l.panels.size(), "Throughput against devices") + body + "unset multiplot\n",
          caption};
}

Figure scaling_figure(const Inputs& in, const FigureOptions& o) {
  std::vector<BenchGroup> scaled;  // the configurations measured on two or more device counts
  for (const BenchGroup& g : in.bench)
    if (g.rows.size() >= 2) scaled.push_back(g);
  const SeriesLayout l = series_layout(scaled, o, 1);
  std::string caption = join(TextSet(in.bench_captions.begin(), in.bench_captions.end()), "; ") +
                        "; scaling efficiency = images/s at k devices / (k/k0 x images/s at the fewest, k0), "
                        "scaling_efficiency in results.csv; dashed: 1, ideal scaling" + l.caption;
  auto plot_of = [&](const std::vector<size_t>& groups) {
    std::string b, plot = "plot ";
    for (size_t n = 0; n < groups.size(); ++n) {
      const BenchGroup& g = l.groups[groups[n]];
      std::vector<std::vector<double>> rows;
      for (const BenchRow& r : g.rows) rows.push_back({r.ranks, r.scaling_efficiency});
      const std::string name = "s" + std::to_string(groups[n]);
      b += datablock(name, rows);
      plot += std::string(n ? ", \\\n  " : "") + "$" + name + " using 1:2 with linespoints lw 2" + series_point(n) +
              series_colour(n) + " title " + gnuplot_quoted(g.label);
    }
    return b + plot + ", \\\n  1 with lines dt 2 lc rgb 'gray40' title 'ideal scaling (1)'\n";
  };
  const std::string axes = ranks_axis(scaled) + "set ylabel 'scaling efficiency (1 = ideal)'\nset yrange [0:1.1<*]\n";
  return lines_figure("scaling", "Scaling efficiency against devices", axes, caption, l, plot_of, 1, 1);
}

namespace {

// Bars at x = 0, 1, ... labelled with each row's device count: "set xtics ('1' 0, '2' 1)\n".
std::string device_xtics(const BenchGroup& g) {
  std::string xtics = "set xtics (";
  for (size_t i = 0; i < g.rows.size(); ++i)
    xtics += std::string(i ? ", " : "") + gnuplot_quoted(fmt(g.rows[i].ranks)) + " " + std::to_string(i);
  return xtics + ")\n";
}

}  // namespace

std::vector<Figure> phases_figures(const Inputs& in) {
  std::vector<Figure> out;
  for (const BenchGroup& g : in.bench) {
    std::vector<std::vector<double>> rows;
    for (size_t i = 0; i < g.rows.size(); ++i) {
      const BenchRow& r = g.rows[i];
      rows.push_back({static_cast<double>(i), r.load * 1e3, r.forward * 1e3, r.backward * 1e3,
                      std::max(0.0, r.comm_exposed - r.wait) * 1e3,
                      r.optimizer * 1e3, r.wait * 1e3, r.step * 1e3});
    }
    const std::string caption = g.run + "; the bars stack the mean phase times of a step, "
                                "exposed communication is mean_comm_exposed_s less the wait for the slowest rank, which "
                                "lies inside it (docs/measuring.md: Phases)";
    std::string b = datablock("p", rows);
    b += "set title " + gnuplot_quoted("Step time by phase: " + g.label) +
         "\nset xlabel 'devices (ranks)'\nset ylabel 'time per step (ms)'\nset yrange [0:*]\n"
         "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.8 border -1\n"
         "set boxwidth 0.6\nset key outside right top\nset grid y\nset offsets 0, 0, graph 0.08, 0\n" +
         device_xtics(g) + caption_label(caption);
    const char* names[] = {"load + h2d", "forward", "backward", "exposed communication (less wait)", "optimizer",
                           "wait for the slowest rank"};
    b += "plot ";
    for (int c = 0; c < 6; ++c)
      b += std::string(c ? ", " : "") + "$p using " + std::to_string(c + 2) + " title " + gnuplot_quoted(names[c]);
    b += ", $p using 1:8 with points pt 7 ps 1.5 lc rgb 'black' title 'step (measured mean)'\n";
    out.push_back({"phases-" + g.slug, b, caption});
  }
  return out;
}

std::vector<Figure> efficiency_figures(const Inputs& in) {
  std::vector<Figure> out;
  for (const BenchGroup& g : in.bench) {
    std::vector<std::vector<double>> rows;
    for (const auto& r : g.rows)
      rows.push_back({r.ranks, r.scaling_efficiency, r.load_balance, r.comm_efficiency, r.parallel_efficiency});
    const std::string caption = g.run + "; POP metrics: parallel efficiency = load balance x communication "
                                "efficiency";
    std::string b = datablock("e", rows);
    b += "set title " + gnuplot_quoted("Efficiency against devices: " + g.label) + "\n" + ranks_axis({g}) +
         "set ylabel 'efficiency (fraction, 1 = ideal)'\nset yrange [0:1.1]\nset key outside right top\n" +
         caption_label(caption) +
         "plot $e using 1:2 with linespoints lw 2 pt 7 title 'scaling efficiency', "
         "$e using 1:3 with linespoints pt 5 title 'load balance', "
         "$e using 1:4 with linespoints pt 9 title 'communication efficiency', "
         "$e using 1:5 with linespoints pt 11 title 'parallel efficiency'\n";
    out.push_back({"efficiency-" + g.slug, b, caption});
  }
  return out;
}

std::vector<Figure> busbw_figures(const Inputs& in) {
  std::vector<Figure> out;
  for (size_t f = 0; f < in.collectives.size(); ++f) {
    const CollectiveFigure& fig = in.collectives[f];
    std::string b, plot = "plot ";
    for (size_t i = 0; i < fig.series.size(); ++i) {
      std::vector<std::vector<double>> rows;
      for (auto [bytes, bw] : fig.series[i].points) rows.push_back({bytes, bw});
      b += datablock(std::string("b").append(std::to_string(i)), rows);
      plot += std::string(i ? ", \\\n  " : "") + "$b" + std::to_string(i) + " using 1:2 with linespoints pt 7 title " +
              gnuplot_quoted(fig.series[i].label);
    }
    // The limit lines, through the sizes measured: a rate is the same at every size; one rank's
    // memcpy is faster at the sizes the caches hold.
    size_t k = 0;
    double highest_limit = 0;
    for (const auto& [source, by_size] : fig.limits) {
      const std::string name = "l" + std::to_string(k++);
      std::vector<std::vector<double>> rows;
      double lo = 1e300, hi = 0;
      for (auto [bytes, gbs] : by_size) {
        rows.push_back({bytes, gbs});
        lo = std::min(lo, gbs);
        hi = std::max(hi, gbs);
      }
      highest_limit = std::max(highest_limit, hi);
      b += datablock(name, rows);
      const std::string what = source == "memcpy"    ? "one rank's memcpy"
                               : source == "net-sim" ? "--net-sim rate"
                               : source == "link"    ? "link rate"
                                                     : source;
      const std::string gbs = rounded(lo, 3) == rounded(hi, 3)
                                  ? rounded(lo, 3) + " GB/s"
                                  : rounded(lo, 3) + "-" + rounded(hi, 3) + " GB/s by size";
      plot += ", \\\n  $" + name + " using 1:2 with " + (rows.size() > 1 ? "lines" : "points pt 1") +
              " dt 3 lw 2 lc rgb 'black' title " + gnuplot_quoted("limit: " + what + " " + gbs);
    }
    // A limit far above every measurement (a copy inside the caches) would flatten the lines
    // measured: the y axis stops at twice the best busbw and the limit leaves the plot there.
    double best = 0;
    for (const auto& s : fig.series)
      for (auto [bytes, bw] : s.points) best = std::max(best, bw);
    const bool cut = best > 0 && highest_limit > 2 * best;
    const std::string caption = fig.run + "; out-of-place rows, busbw as nccl-tests defines it" +
                                (fig.limits.empty() ? "" : "; dotted: the busbw limit dpx collective stated") +
                                (cut ? " (above the plot where over twice the best busbw)" : "");
    b += "set title " + gnuplot_quoted("Bus bandwidth: " + fig.collective) +
         "\nset xlabel 'message size (bytes)'\nset logscale x 2\nset format x '%.0b%B'\n"
         "set ylabel 'bus bandwidth (GB/s)'\nset yrange [0:" + (cut ? rounded(2 * best, 3) : std::string("*")) +
         "]\nset clip two\nset grid\nset key outside right top\n" +
         caption_label(caption) + plot + "\n";
    out.push_back({"busbw-" + slug(fig.key), b, caption});
  }
  return out;
}


namespace {

// "batch size per rank", "global batch size", or both when the groups mix weak and strong scaling.
std::string batch_axis_label(const std::vector<BenchGroup>& groups) {
  bool weak = false, strong = false;
  for (const BenchGroup& g : groups) (g.weak ? weak : strong) = true;
  if (weak && strong) return "batch size (per rank for weak scaling, global for strong)";
  return weak ? "batch size per rank" : "global batch size";
}

}  // namespace

Figure best_devices_figure(const Inputs& in, const FigureOptions& o) {
  // Per model (in the order met), rows (batch, throughput-optimal devices, most efficient devices).
  std::vector<std::string> models;
  std::map<std::string, std::vector<std::vector<double>>> rows;
  std::vector<BenchGroup> used;
  std::set<double> batches, devices;
  for (const BenchGroup& g : in.bench) {
    if (g.rows.size() < 2) continue;
    const BenchRow* fastest = &g.rows.front();
    double efficient = g.rows.front().ranks;  // the baseline: efficiency 1 by definition
    for (const BenchRow& r : g.rows) {
      if (r.images_per_s > fastest->images_per_s) fastest = &r;
      if (r.scaling_efficiency >= o.min_efficiency) efficient = std::max(efficient, r.ranks);
      devices.insert(r.ranks);
    }
    if (!rows.count(g.model)) models.push_back(g.model);
    rows[g.model].push_back({g.batch, fastest->ranks, efficient});
    batches.insert(g.batch);
    used.push_back(g);
  }
  const std::string threshold = fmt(o.min_efficiency);
  std::string caption = join(TextSet(in.bench_captions.begin(), in.bench_captions.end()), "; ") +
                        "; throughput-optimal: the device count with the most images/s; efficient: the most devices "
                        "whose scaling efficiency (against the fewest devices) is at least " + threshold +
                        " (--min-efficiency)";
  std::string b, plot = "plot ";
  for (size_t m = 0; m < models.size(); ++m) {
    auto& r = rows[models[m]];
    std::sort(r.begin(), r.end());
    const std::string name = "d" + std::to_string(m), lc = " lc " + std::to_string(m + 1);
    b += datablock(name, r);
    plot += std::string(m ? ", \\\n  " : "") + "$" + name + " using 1:2 with linespoints lw 2 pt 7 ps 1.5" + lc +
            " title " + gnuplot_quoted(models[m] + ": throughput-optimal") + ", \\\n  $" + name +
            " using 1:3 with linespoints dt 2 pt 6 ps 2.5" + lc + " title " +
            gnuplot_quoted(models[m] + ": efficient (>= " + threshold + ")");
  }
  b += "set title 'Best device count against batch size'\nset xlabel " + gnuplot_quoted(batch_axis_label(used)) + "\n" +
       log2_axis('x', batches) + "set ylabel 'devices (ranks)'\n" + log2_axis('y', devices) +
       "set grid\nset key outside right top\n" + caption_label(caption) + plot + "\n";
  return {"best-devices", b, caption};
}

std::vector<Figure> comm_compute_figures(const Inputs& in) {
  std::vector<Figure> out;
  for (const BenchGroup& g : in.bench) {
    std::vector<std::vector<double>> rows;
    for (size_t i = 0; i < g.rows.size(); ++i) {
      const BenchRow& r = g.rows[i];
      rows.push_back({static_cast<double>(i), (r.forward + r.backward) * 1e3, r.comm_total * 1e3, r.comm_exposed * 1e3});
    }
    const std::string caption = g.run + "; means per step: computation = forward + backward, communication total = "
                                "mean_comm_total_s (hidden behind backward or not), exposed = mean_comm_exposed_s (what "
                                "the step waited for, docs/measuring.md: Phases)";
    std::string b = datablock("c", rows);
    b += "set title " + gnuplot_quoted("Computation and communication per step: " + g.label) +
         "\nset xlabel 'devices (ranks)'\nset ylabel 'time per step (ms)'\nset yrange [0:*]\n"
         "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
         "set key outside right top\nset grid y\nset offsets 0, 0, graph 0.1, 0\n" + device_xtics(g) + caption_label(caption) +
         "plot $c using 2 title 'computation (forward + backward)', $c using 3 title 'communication, total', "
         "$c using 4 title 'communication, exposed'\n";
    out.push_back({"comm-compute-" + g.slug, b, caption});
  }
  return out;
}

Figure bytes_per_epoch_figure(const Inputs& in, const FigureOptions& o) {
  const SeriesLayout l = series_layout(in.bench, o, 2);  // two lines a configuration: formula, counted
  const std::string caption = join(TextSet(in.bench_captions.begin(), in.bench_captions.end()), "; ") +
                              "; formula: bytes_per_epoch_formula, N/(B k) steps (updates under --accumulate) x "
                              "trainable parameters x 4 bytes; counted: bytes_per_epoch_counted, what rank 0's "
                              "communicator sent (docs/measuring.md: Metrics)" + l.caption;
  auto plot_of = [&](const std::vector<size_t>& groups) {
    std::string b, plot = "plot ";
    for (size_t n = 0; n < groups.size(); ++n) {
      const BenchGroup& g = l.groups[groups[n]];
      std::vector<std::vector<double>> rows;
      for (const BenchRow& r : g.rows) rows.push_back({r.ranks, r.bytes_per_epoch_formula, r.bytes_per_epoch_counted});
      const std::string name = "y" + std::to_string(groups[n]), lc = series_colour(n);
      b += datablock(name, rows);
      plot += std::string(n ? ", \\\n  " : "") + "$" + name + " using 1:2 with linespoints lw 2" + series_point(n) +
              lc + " title " + gnuplot_quoted(g.label + ": formula") + ", \\\n  $" + name +
              " using 1:3 with linespoints dt 2" + series_point(n, true) + " ps 2" + lc + " title " +
              gnuplot_quoted(g.label + ": counted");
    }
    return b + plot + "\n";
  };
  const std::string axes = ranks_axis(in.bench) + "set ylabel 'bytes per epoch (per rank)'\nset format y '%.1s %cB'\n"
                           "set yrange [0:*]\n";
  return lines_figure("bytes-per-epoch", "Bytes sent per epoch against devices", axes, caption, l, plot_of, 2, 0);
}

std::vector<Figure> weak_strong_figures(const Inputs& in) {
  std::vector<Figure> out;
  std::vector<std::string> models;  // in the order met
  for (const BenchGroup& g : in.bench)
    if (std::find(models.begin(), models.end(), g.base_model) == models.end()) models.push_back(g.base_model);
  for (const std::string& model : models) {
    std::vector<BenchGroup> groups;
    bool weak = false, strong = false;
    for (const BenchGroup& g : in.bench)
      if (g.base_model == model && g.rows.size() >= 2) {
        groups.push_back(g);
        (g.weak ? weak : strong) = true;
      }
    if (!weak || !strong) continue;
    std::string b, plot = "plot ";
    for (size_t i = 0; i < groups.size(); ++i) {
      const BenchGroup& g = groups[i];
      std::vector<std::vector<double>> rows;
      for (const BenchRow& r : g.rows) rows.push_back({r.ranks, r.scaling_efficiency});
      const std::string name = "w" + std::to_string(i);
      b += datablock(name, rows);
      plot += std::string(i ? ", \\\n  " : "") + "$" + name + " using 1:2 with linespoints lw 2 pt 7" +
              (g.weak ? "" : " dt 2") + " title " +
              gnuplot_quoted(
                  (g.weak ? "weak, batch " + fmt(g.batch) + " per rank" : "strong, batch " + fmt(g.batch) + " in all"));
    }
    const std::string caption = groups.front().run +
                                "; scaling efficiency = images/s at k devices / (k x images/s at the first): weak "
                                "scaling keeps the batch per rank, strong scaling the global batch";
    b += "set title " + gnuplot_quoted("Weak and strong scaling: " + model) + "\n" + ranks_axis(groups) +
         "set ylabel 'scaling efficiency (1 = ideal)'\nset yrange [0:1.1]\nset key outside right top\n" +
         caption_label(caption) + plot + "\n";
    out.push_back({"weak-strong-" + slug(model), b, caption});
  }
  return out;
}

}  // namespace dpx::analysis::plot
