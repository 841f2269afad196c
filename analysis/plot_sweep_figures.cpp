// `dpx plot`'s figures of two sweeps that vary what the others hold fixed: loader workers (the
// loading figure, `dpx study loading`) and the batch that fits a memory budget (max-batch,
// `dpx bench --batch-sizes max`). The shared helpers are plot_figures.cpp's (plot_data.hpp).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "analysis/plot_data.hpp"

namespace dpx::analysis::plot {

std::vector<std::vector<const BenchGroup*>> loader_families(const Inputs& in) {
  std::vector<std::vector<const BenchGroup*>> families;
  std::map<std::string, size_t> index;
  for (const BenchGroup& g : in.bench) {
    if (g.rows.empty() || std::isnan(g.rows.front().workers)) continue;
    const auto [it, added] = index.emplace(g.loader_family_key, families.size());
    if (added) families.emplace_back();
    families[it->second].push_back(&g);
  }
  std::erase_if(families, [](const std::vector<const BenchGroup*>& f) { return f.size() < 2; });
  return families;
}

// NEF's question, per model and batch size: what the step waits for its batch against what it
// computes, as loader workers are added, a colour per device count.
std::vector<Figure> loading_figures(const Inputs& in) {
  std::vector<Figure> out;
  for (const std::vector<const BenchGroup*>& family : loader_families(in)) {
    std::map<double, std::vector<std::vector<double>>> by_ranks;  // ranks -> rows of (workers, ms, ms, ms)
    std::set<double> workers;
    for (const BenchGroup* g : family)
      for (const BenchRow& r : g->rows) {
        workers.insert(r.workers);
        by_ranks[r.ranks].push_back({r.workers, r.load * 1e3, (r.forward + r.backward) * 1e3,
                                     std::max(0.0, r.comm_exposed - r.wait) * 1e3});
      }
    std::string b, plot = "plot ";
    int colour = 0;
    for (auto& [ranks, rows] : by_ranks) {
      std::sort(rows.begin(), rows.end());
      const std::string name = "l" + std::to_string(colour), lc = " lc " + std::to_string(++colour);
      const std::string of = ", " + fmt(ranks) + (ranks == 1 ? " rank" : " ranks");
      b += datablock(name, rows);
      plot += std::string(colour > 1 ? ", \\\n  " : "") + "$" + name + " using 1:2 with linespoints lw 2 pt 7" + lc +
              " title " + gnuplot_quoted("load (waited for)" + of) + ", \\\n  $" + name +
              " using 1:3 with linespoints dt 2 pt 6" + lc + " title " + gnuplot_quoted("forward + backward" + of);
      if (ranks > 1)
        plot += ", \\\n  $" + name + " using 1:4 with linespoints dt 3 pt 4" + lc + " title " +
                gnuplot_quoted("exposed communication" + of);
    }
    std::string xtics = "set xtics (";
    for (double w : workers) xtics += (w == *workers.begin() ? "" : ", ") + gnuplot_quoted(fmt(w)) + " " + fmt(w);
    const std::string caption = family.front()->run + "; means per step against loader threads per rank (--workers, "
                                "0: the training thread decodes): load = what the step waited for its batch "
                                "(mean_load_s + mean_h2d_s), exposed communication less the wait for the slowest rank "
                                "(docs/measuring.md: Phases); the loader's own images/s per worker is in results.csv";
    b += "set title " +
         gnuplot_quoted("Loading against computation by loader workers: " + family.front()->loader_family_label) +
         "\nset xlabel 'loader workers per rank (--workers)'\nset ylabel 'time per step (ms)'\nset yrange [0:*]\n"
         "set xrange [" +
         fmt(*workers.begin() - 0.3) + ":" + fmt(*workers.rbegin() + 0.3) + "]\n" + xtics +
         ")\nset grid\nset key outside right top\n" + caption_label(caption) + plot + "\n";
    out.push_back({"loading-" + slug(family.front()->loader_family_key), b, caption});
  }
  return out;
}


// --batch-sizes max: a cluster of bars per model (x), a bar per device count, the batch found.
Figure max_batch_figure(const Inputs& in) {
  std::vector<std::string> models;                    // in the order met
  std::set<double> ranks, budgets;
  std::map<std::pair<std::string, double>, double> batch;  // (model, ranks) -> per-rank batch
  for (const BenchGroup& g : in.bench)
    for (const BenchRow& r : g.rows) {
      if (std::isnan(r.memory_budget)) continue;
      if (std::find(models.begin(), models.end(), g.base_model) == models.end()) models.push_back(g.base_model);
      ranks.insert(r.ranks);
      budgets.insert(r.memory_budget);
      batch[{g.base_model, r.ranks}] = r.rank_batch;
    }
  std::vector<std::vector<double>> rows;
  std::string xtics = "set xtics (";
  for (size_t m = 0; m < models.size(); ++m) {
    std::vector<double> row = {static_cast<double>(m)};
    for (double k : ranks) {
      auto it = batch.find({models[m], k});
      row.push_back(it == batch.end() ? kNone : it->second);
    }
    rows.push_back(row);
    xtics += (m ? ", " : "") + gnuplot_quoted(models[m]) + " " + std::to_string(m);
  }
  TextSet budget_text;
  for (double b : budgets) budget_text.insert(fmt(b / 1e9) + " GB");
  const std::string caption = join(TextSet(in.bench_captions.begin(), in.bench_captions.end()), "; ") +
                              "; the largest batch per rank whose run stayed within the memory budget (" +
                              join(budget_text, ", ") + "; the allocator's reserved peak: the process's host memory "
                              "on CPUs, each GPU's on GPUs), found by dpx bench --batch-sizes max";
  std::string b = datablock("m", rows);
  b += "set title 'Largest batch within the memory budget'\nset ylabel 'batch per rank'\nset yrange [0:*]\n"
       "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
       "set boxwidth 0.9\nset key outside right top\nset grid y\nset offsets 0, 0, graph 0.1, 0\nset datafile missing 'nan'\n" +
       xtics + ")\n" + caption_label(caption) + "plot ";
  int column = 2;
  for (double k : ranks) {
    b += std::string(column > 2 ? ", " : "") + "$m using " + std::to_string(column) + " title " +
         gnuplot_quoted(fmt(k) + (k == 1 ? " rank" : " ranks"));
    ++column;
  }
  b += "\n";
  return {"max-batch", b, caption};
}

// dpx predict --csv: images/s (with ideal scaling) and scaling efficiency against ranks, a line
// per batch size; where predict compared with dpx bench (--compare), the measured points beside.
std::vector<Figure> prediction_figures(const Inputs& in) {
  std::vector<Figure> out;
  for (const PredictionRun& run : in.predictions) {
    std::map<double, std::vector<const PredictionRow*>> by_batch;
    std::set<double> ranks;
    bool measured = false;
    for (const PredictionRow& r : run.rows) {
      by_batch[r.batch].push_back(&r);
      ranks.insert(r.ranks);
      measured = measured || !std::isnan(r.measured_step_s);
    }
    const std::string batch_word = run.scaling == "weak" ? "/rank" : " in all";
    for (const bool efficiency : {false, true}) {
      std::string b, plot = "plot ";
      int colour = 0;
      for (auto& [batch, rows] : by_batch) {
        std::sort(rows.begin(), rows.end(), [](const PredictionRow* a, const PredictionRow* c) { return a->ranks < c->ranks; });
        std::vector<std::vector<double>> data;
        const PredictionRow& first = *rows.front();
        for (const PredictionRow* r : rows) {
          // Measured images/s: the global batch over the measured step; its efficiency against the
          // first row's prediction, as the predicted ones are.
          const double global = r->rank_batch * r->ranks;
          const double m_ips = std::isnan(r->measured_step_s) ? kNone : global / r->measured_step_s;
          const double ideal = first.images_per_s * r->ranks / first.ranks;
          data.push_back({r->ranks, efficiency ? r->efficiency : r->images_per_s, efficiency ? kNone : ideal,
                          std::isnan(m_ips) ? kNone : (efficiency ? m_ips / ideal : m_ips)});
        }
        const std::string name = "q" + std::to_string(colour), lc = " lc " + std::to_string(++colour);
        b += datablock(name, data);
        const std::string what = "batch " + fmt(batch) + batch_word;
        plot += std::string(colour > 1 ? ", \\\n  " : "") + "$" + name + " using 1:2 with linespoints lw 2 pt 7" + lc +
                " title " + gnuplot_quoted(what + ", predicted");
        if (!efficiency) plot += ", \\\n  $" + name + " using 1:3 with lines dt 2" + lc + " notitle";
        if (measured)
          plot += ", \\\n  $" + name + " using 1:4 with points pt 4 ps 1.8 lw 2" + lc + " title " +
                  gnuplot_quoted(what + ", measured (dpx bench)");
      }
      if (!efficiency) plot += ", \\\n  NaN with lines dt 2 lc rgb 'gray40' title 'dashed: ideal scaling (first point x k/k0)'";
      const std::string caption =
          run.run + (efficiency ? "; scaling efficiency = throughput / (k x one rank's), predicted from the network's "
                                  "fit or link and one replica's measured step (docs/predicting.md)"
                                : "; images/s predicted from the network's fit or link and one replica's measured step "
                                  "(docs/predicting.md)") +
          (measured ? "; squares: dpx bench's measurement of the same configuration (predict --compare)" : "");
      b += "set title " +
           gnuplot_quoted(std::string(efficiency ? "Predicted scaling efficiency: " : "Predicted throughput: ") +
                          run.model + ", DDP " + run.algo) +
           "\nset xlabel 'devices (ranks)'\n" + log2_axis('x', ranks) + "set grid\nset ylabel " +
           gnuplot_quoted(efficiency ? "scaling efficiency (1 = ideal)" : "throughput (images/s)") +
           // Weak scaling multiplies the throughput by k: a log axis keeps 1 rank and 1024 readable.
           (efficiency ? "\nset yrange [0:1.1]" : "\nset logscale y 10\nset yrange [*:*]") +
           "\nset datafile missing 'nan'\nset key outside right top\n" + caption_label(caption) + plot + "\n";
      out.push_back({std::string(efficiency ? "prediction-efficiency-" : "prediction-") + run.model, b, caption});
    }
  }
  return out;
}

}  // namespace dpx::analysis::plot
