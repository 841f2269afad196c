// `dpx plot`'s figures of time: the training loss against step and epoch (a line per
// configuration, a panel per model when crowded) and the timeline of a dpx train --trace file.
// The shared helpers are plot_figures.cpp's (plot_data.hpp).
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "analysis/plot_data.hpp"
#include "core/error.hpp"

namespace dpx::analysis::plot {

std::vector<Figure> loss_epoch_figures(const Inputs& in) {
  std::vector<Figure> out;
  for (const LossRun& lr : in.losses) {
    std::string caption = lr.run + "; rank 0's training loss of " + lr.source +
                          " against epoch + step / the epoch's steps";
    std::string b, plot = "plot ";
    size_t drawn = 0;
    for (const LossSeries& s : lr.series) {
      if (s.by_epoch.empty()) continue;
      std::vector<std::vector<double>> rows;
      for (auto [epoch, loss] : s.by_epoch) rows.push_back({epoch, loss});
      const std::string name = "e" + std::to_string(drawn);
      b += datablock(name, rows);
      plot += std::string(drawn++ ? ", \\\n  " : "") + "$" + name + " using 1:2 with lines lw 2 title " +
              gnuplot_quoted(s.label);
    }
    if (drawn == 0) continue;
    if (lr.threshold > 0) {
      caption += "; dashed: --loss-threshold " + fmt(lr.threshold);
      plot += ", \\\n  " + fmt(lr.threshold) + " with lines dt 2 lw 2 lc rgb 'black' title " +
              gnuplot_quoted("loss threshold " + fmt(lr.threshold));
    }
    b += "set title 'Training loss against epoch'\nset xlabel 'epoch'\nset ylabel 'loss (rank 0)'\n"
         "set xtics 1\nset grid\nset key outside right top\n" + caption_label(caption) + plot + "\n";
    out.push_back({"loss-epoch", b, caption});
  }
  return out;
}

namespace {

// One loss plot of `series` of `lr`: their lines, the threshold and where each crossed it.
std::string loss_plot(const LossRun& lr, const std::vector<const LossSeries*>& series, const std::string& prefix) {
  std::string b, plot = "plot ";
  std::vector<std::vector<double>> crossings;
  for (size_t i = 0; i < series.size(); ++i) {
    const LossSeries& s = *series[i];
    std::vector<std::vector<double>> rows;
    for (auto [step, loss] : s.points) rows.push_back({step, loss});
    const std::string name = prefix + std::to_string(i);
    b += datablock(name, rows);
    if (i) plot += ", \\\n  ";
    plot.append("$").append(name).append(" using 1:2 with lines lw 2 lc ").append(std::to_string(i + 1));
    plot.append(" title ").append(gnuplot_quoted(s.label));
    if (s.threshold_step >= 0) crossings.push_back({s.threshold_step, s.threshold_loss});
  }
  if (lr.threshold > 0) {
    plot += ", \\\n  " + fmt(lr.threshold) + " with lines dt 2 lw 2 lc rgb 'black' title " +
            gnuplot_quoted("loss threshold " + fmt(lr.threshold));
    if (!crossings.empty()) {
      b += datablock(prefix + "x", crossings);
      plot += ", \\\n  $" + prefix + "x using 1:2 with points pt 6 ps 2.5 lw 2 lc rgb 'black' title 'first step below "
              "the threshold'";
    }
  }
  return b + plot + "\n";
}

}  // namespace

std::vector<Figure> loss_figures(const Inputs& in) {
  std::vector<Figure> out;
  for (const LossRun& lr : in.losses) {
    std::string caption = lr.run + "; rank 0's training loss at each global step of " + lr.source;
    // With --repeat, each configuration's runs train alike (the same seed): the first run stands
    // for them, so that a sweep's lines are its configurations.
    std::vector<LossSeries> kept;
    bool repeats = false;
    for (const LossSeries& s : lr.series) {
      const size_t at = s.label.rfind("_run");
      if (at != std::string::npos && s.label.find_first_not_of("0123456789", at + 4) == std::string::npos) {
        repeats = true;
        if (s.label.substr(at + 4) != "1") continue;
        LossSeries first = s;
        first.label = s.label.substr(0, at);
        kept.push_back(first);
      } else {
        kept.push_back(s);
      }
    }
    if (repeats) caption += "; of the --repeat runs of a configuration, the first (the others train alike)";
    if (lr.threshold > 0)
      caption += "; dashed: --loss-threshold " + fmt(lr.threshold) + ", circles: the first step below it (threshold_step)";
    // More than six lines of several models: a panel per model (the configuration's name up to
    // "_b<batch>", as dpx bench names its steps files: squeezenet1_1_b32_...).
    Panels<const LossSeries*> panels;
    for (const LossSeries& s : kept) {
      size_t cut = s.label.find("_b");
      while (cut != std::string::npos && !(cut + 2 < s.label.size() && std::isdigit(static_cast<unsigned char>(s.label[cut + 2]))))
        cut = s.label.find("_b", cut + 1);
      add_to_panel(panels, s.label.substr(0, cut), &s);
    }
    const std::string axes = "set xlabel 'global step'\nset ylabel 'loss (rank 0)'\nset grid\n";
    std::string b;
    if (kept.size() <= kMaxSeries || panels.size() < 2) {
      std::vector<const LossSeries*> all;
      for (const LossSeries& s : kept) all.push_back(&s);
      b = "set title 'Training loss against global step'\n" + axes + "set key outside right top\n" +
          caption_label(caption) + loss_plot(lr, all, "l");
    } else {
      caption += "; a panel per model";
      b = axes + caption_label(caption) + multiplot(panels.size(), "Training loss against global step");
      for (size_t p = 0; p < panels.size(); ++p)
        b += "set title " + gnuplot_quoted(panels[p].first) + "\n" +
             panel_key(panels[p].second.size() + (lr.threshold > 0 ? 1 : 0), panels.size()) +
             loss_plot(lr, panels[p].second, "p" + std::to_string(p) + "l");
      b += "unset multiplot\n";
    }
    out.push_back({"loss", b, caption});
  }
  return out;
}

std::vector<Figure> timeline_figures(const Inputs& in, const FigureOptions& o) {
  static const std::vector<std::pair<std::string, std::string>> phases = {
      {"load", "load"},          {"h2d", "h2d"},
      {"forward", "forward"},    {"backward", "backward"},
      {"comm_exposed", "comm (exposed)"}, {"optimizer", "optimizer"},
      {"wait", "wait"}, {"all_reduce", "all-reduce (each bucket)"}};
  std::vector<Figure> out;
  for (const Trace& tr : in.traces) {
    std::vector<TraceBox> kept;
    for (const TraceBox& box : tr.boxes)
      if (o.first_step < 0 || (box.step >= o.first_step && box.step <= o.last_step)) kept.push_back(box);
    if (kept.empty())
      usage_fail("--steps ", o.first_step, ":", o.last_step, ": '", tr.source,
                 "' traced none of these steps (dpx train --trace-steps says which it traces)");
    double t0 = kept.front().start_ms;
    for (const TraceBox& box : kept) t0 = std::min(t0, box.start_ms);
    std::string b, plot = "plot ";
    int series = 0;
    for (const auto& [phase, title] : phases) {
      std::vector<std::vector<double>> rows;
      // The phases fill a rank's row; its buckets' all-reduces, which overlap backward, a thin
      // band under it.
      const bool band = phase == "all_reduce";
      const double lo = band ? 0.38 : -0.35, hi = band ? 0.48 : 0.35;
      for (const TraceBox& box : kept)
        if (box.phase == phase)
          rows.push_back({(box.start_ms + box.end_ms) / 2 - t0, box.rank + (lo + hi) / 2, box.start_ms - t0,
                          box.end_ms - t0, box.rank + lo, box.rank + hi});
      if (rows.empty()) continue;
      const std::string name = "p" + std::to_string(series);
      b += datablock(name, rows);
      plot += std::string(series ? ", \\\n  " : "") + "$" + name + " using 1:2:3:4:5:6 with boxxyerror fs solid 0.8 "
              "border -1 lc " + std::to_string(series + 1) + " title " + gnuplot_quoted(title);
      ++series;
    }
    std::string ytics = "set ytics (";
    for (int r = 0; r < tr.ranks; ++r)
      ytics += std::string(r ? ", " : "") + gnuplot_quoted("rank " + std::to_string(r)) + " " + std::to_string(r);
    const std::string window = o.first_step < 0 ? "every traced step"
                                                : "steps " + std::to_string(o.first_step) + " to " +
                                                      std::to_string(o.last_step);
    bool buckets = false;
    for (const TraceBox& box : kept) buckets = buckets || box.phase == "all_reduce";
    const std::string caption = tr.run + "; " + window + ", a row per rank, time from the first phase shown; comm is "
                                "the exposed communication (comm_exposed), the part backward did not hide" +
                                (buckets ? "; the band under each row: each DDP bucket's all-reduce on the rank's "
                                           "communication thread"
                                         : "");
    b += "set title 'Phases of each rank over time'\nset xlabel 'time (ms)'\nset ylabel 'rank'\nset yrange [" +
         fmt(tr.ranks - 0.5) + ":-0.5]\n" + ytics + ")\nset grid x\nset key outside right top\n" +
         caption_label(caption) + plot + "\n";
    out.push_back({"timeline", b, caption});
  }
  return out;
}

}  // namespace dpx::analysis::plot
