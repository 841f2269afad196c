// `dpx plot`: reads bench results.csv and collective CSV files by column name (other columns
// may come and go), writes one gnuplot script per figure with the data inline, runs gnuplot on
// it and renames the images into place only once every figure has been drawn.
#include "analysis/plot.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "analysis/csv_table.hpp"
#include "analysis/gnuplot.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace dpx::analysis {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kBenchRun =
    "dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 --dataset synthetic --out runs/bench";
constexpr std::string_view kCollectiveRun = "dpx collective --algo all -b 1K -e 64M -f 4 --csv c.csv";

struct BenchRow {
  double ranks = 0, images_per_s = 0;
  double load = 0, forward = 0, backward = 0, comm_exposed = 0, optimizer = 0, wait = 0, step = 0;
  double scaling_efficiency = 0, load_balance = 0, comm_efficiency = 0, parallel_efficiency = 0;
};

// Rows of one model and batch size (and parallel mode, and folder where there are several).
struct BenchGroup {
  std::string label, slug, source;
  std::string run;             // "data: FILE from dpx bench (models ..., ...)"
  std::vector<BenchRow> rows;  // by ranks
};

struct BusbwSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (bytes, busbw_gbs)
};

struct CollectiveFigure {
  std::string collective, source, key;
  std::string run;  // "data: FILE from dpx collective --csv (...)"
  std::vector<BusbwSeries> series;
};

struct Inputs {
  std::vector<BenchGroup> bench;
  std::vector<std::string> bench_captions;
  std::vector<CollectiveFigure> collectives;
  std::vector<std::string> collective_captions;
};

std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  return out;
}

// Shorter first, so that numbers in text sort as numbers ("8" before "32").
struct ShortFirst {
  bool operator()(const std::string& a, const std::string& b) const {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  }
};

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

// A gnuplot single-quoted string: a quote is doubled, nothing else is special.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

void read_bench(const CsvTable& t, const std::string& source, bool several, Inputs& in) {
  const size_t c_model = t.column("model"), c_ranks = t.column("ranks"), c_ips = t.column("images_per_s");
  const size_t c_batch = t.column("batch_size"), c_rank_batch = t.column("rank_batch");
  const size_t c_par = t.column("parallel"), c_dev = t.column("devices"), c_data = t.column("dataset");
  auto col = [&](std::string_view n) { return t.column(n); };
  const size_t c_load = col("mean_load_s"), c_h2d = col("mean_h2d_s"), c_fwd = col("mean_forward_s"),
               c_bwd = col("mean_backward_s"), c_comm = col("mean_comm_exposed_s"), c_opt = col("mean_optimizer_s"),
               c_wait = col("mean_wait_s"), c_step = col("mean_step_s"), c_se = col("scaling_efficiency"),
               c_lb = col("load_balance"), c_ce = col("comm_efficiency"), c_pe = col("parallel_efficiency");
  const bool has_scaling = t.has("scaling");
  std::set<std::string> parallels;
  std::set<std::string, ShortFirst> models, devices, datasets, batches, scalings;
  for (size_t r = 0; r < t.rows(); ++r) parallels.insert(t.text(r, c_par));
  std::map<std::string, size_t> index;
  for (size_t r = 0; r < t.rows(); ++r) {
    const std::string scaling = has_scaling ? t.text(r, t.column("scaling")) : "strong";
    // Weak scaling keeps the per-rank batch, strong scaling the global one: the sweep's batch size.
    const bool weak = scaling == "weak";
    const std::string batch = weak ? t.text(r, c_rank_batch) : t.text(r, c_batch);
    std::string label = t.text(r, c_model) + " batch " + batch + (weak ? "/rank" : "");
    std::string key = t.text(r, c_model) + "-b" + batch;
    if (parallels.size() > 1) {
      label += " " + t.text(r, c_par);
      key += "-" + t.text(r, c_par);
    }
    if (several) {
      label += " (" + source + ")";
      key += "-" + fs::path(source).parent_path().filename().string();
    }
    models.insert(t.text(r, c_model));
    devices.insert(t.text(r, c_dev));
    datasets.insert(t.text(r, c_data));
    batches.insert(batch);
    scalings.insert(scaling);
    BenchRow b;
    b.ranks = t.number(r, c_ranks);
    b.images_per_s = t.number(r, c_ips);
    b.load = t.number(r, c_load) + t.number(r, c_h2d);
    b.forward = t.number(r, c_fwd);
    b.backward = t.number(r, c_bwd);
    b.comm_exposed = t.number(r, c_comm);
    b.optimizer = t.number(r, c_opt);
    b.wait = t.number(r, c_wait);
    b.step = t.number(r, c_step);
    b.scaling_efficiency = t.number(r, c_se);
    b.load_balance = t.number(r, c_lb);
    b.comm_efficiency = t.number(r, c_ce);
    b.parallel_efficiency = t.number(r, c_pe);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, in.bench.size()).first;
      in.bench.push_back({label, slug(key), source, {}, {}});
    }
    in.bench[it->second].rows.push_back(b);
  }
  for (auto& g : in.bench)
    std::stable_sort(g.rows.begin(), g.rows.end(), [](const BenchRow& a, const BenchRow& b) { return a.ranks < b.ranks; });
  // The command that made the folder when dpx bench recorded it (command.txt), else the sweep
  // as results.csv describes it.
  std::string command;
  if (std::ifstream cmd{(fs::path(source).parent_path() / "command.txt").string()}; cmd) std::getline(cmd, command);
  const std::string run =
      command.rfind("dpx bench", 0) == 0
          ? "data: " + source + " from " + excerpt(command, 600)
          : "data: " + source + " from dpx bench (models " + join(models, ",") + ", batch sizes " + join(batches, ",") +
                ", devices " + join(devices, " ") + ", dataset " + join(datasets, ",") + ", " + join(scalings, "/") +
                " scaling)";
  for (auto& g : in.bench)
    if (g.source == source) g.run = run;
  in.bench_captions.push_back(run);
}

void read_collective(const CsvTable& t, const std::string& source, bool several, Inputs& in) {
  const size_t c_coll = t.column("collective"), c_algo = t.column("algo"), c_backend = t.column("backend"),
               c_ranks = t.column("ranks"), c_bytes = t.column("bytes"), c_place = t.column("placement"),
               c_busbw = t.column("busbw_gbs");
  const bool has_nodes = t.has("nodes");
  std::set<std::string, ShortFirst> ranks, nodes, collectives, backends;
  for (size_t r = 0; r < t.rows(); ++r) {
    ranks.insert(t.text(r, c_ranks));
    if (has_nodes) nodes.insert(t.text(r, t.column("nodes")));
  }
  std::map<std::string, size_t> figures;
  std::map<std::string, std::map<std::string, size_t>> series;
  for (size_t r = 0; r < t.rows(); ++r) {
    if (t.text(r, c_place) != "out") continue;  // in-place rows are the same algorithm again
    const std::string coll = t.text(r, c_coll);
    collectives.insert(coll);
    backends.insert(t.text(r, c_backend));
    std::string label = t.text(r, c_algo) + " " + t.text(r, c_backend);
    if (ranks.size() > 1) label += " " + t.text(r, c_ranks) + " ranks";
    if (nodes.size() > 1) label += " " + t.text(r, t.column("nodes")) + " nodes";
    const std::string fkey = coll + (several ? "-" + fs::path(source).stem().string() : "");
    auto fit = figures.find(fkey);
    if (fit == figures.end()) {
      fit = figures.emplace(fkey, in.collectives.size()).first;
      in.collectives.push_back({coll + (several ? " (" + source + ")" : ""), source, fkey, {}, {}});
    }
    CollectiveFigure& fig = in.collectives[fit->second];
    auto& sidx = series[fkey];
    auto sit = sidx.find(label);
    if (sit == sidx.end()) {
      sit = sidx.emplace(label, fig.series.size()).first;
      fig.series.push_back({label, {}});
    }
    fig.series[sit->second].points.emplace_back(t.number(r, c_bytes), t.number(r, c_busbw));
  }
  if (collectives.empty())
    usage_fail("'", source, "' holds no out-of-place rows (placement out): nothing to plot; make one with ",
               kCollectiveRun);
  for (auto& f : in.collectives)
    for (auto& s : f.series) std::sort(s.points.begin(), s.points.end());
  const std::string run = "data: " + source + " from dpx collective --csv (" + join(collectives, ",") + ", backend " +
                          join(backends, ",") + ", " + join(ranks, ",") + " ranks)";
  for (auto& f : in.collectives)
    if (f.source == source) f.run = run;
  in.collective_captions.push_back(run);
}

Inputs read_inputs(const std::vector<std::string>& paths) {
  if (paths.empty()) usage_fail("dpx plot: name at least one dpx bench folder or dpx collective --csv file");
  std::vector<std::pair<CsvTable, std::string>> bench, coll;
  std::set<std::string> seen;
  for (const std::string& p : paths) {
    std::error_code ec;
    std::string file = p;
    if (fs::is_directory(p, ec)) {
      file = (fs::path(p) / "results.csv").string();
      if (!fs::exists(file, ec))
        usage_fail("'", p, "' is a folder without results.csv: name a dpx bench --out folder or a CSV file");
    } else if (!fs::exists(p, ec)) {
      usage_fail("'", p, "' does not exist: name a dpx bench --out folder or a dpx collective --csv file");
    }
    // The same file named twice (a folder and its results.csv) is read once.
    const std::string canonical = fs::weakly_canonical(file, ec).string();
    if (!seen.insert(canonical.empty() ? file : canonical).second) continue;
    CsvTable t = CsvTable::read(file, "dpx plot");
    const bool is_coll = t.has("busbw_gbs") && t.has("collective");
    const bool is_bench = t.has("images_per_s") && t.has("ranks") && t.has("model");
    if (!is_coll && !is_bench)
      usage_fail("'", file, "' is neither a dpx bench results.csv nor a dpx collective --csv file (its header: ",
                 t.header().empty() ? std::string() : t.header().front(), ",...)");
    if (t.rows() == 0) usage_fail("'", file, "' has a header but no rows: the run that wrote it measured nothing");
    (is_coll ? coll : bench).emplace_back(std::move(t), file);
  }
  Inputs in;
  for (auto& [t, f] : bench) read_bench(t, f, bench.size() > 1, in);
  for (auto& [t, f] : coll) read_collective(t, f, coll.size() > 1, in);
  return in;
}

// One figure to draw: its file stem, the gnuplot commands between the terminal and the output,
// and the sidecar caption.
struct Figure {
  std::string stem, body, caption;
};

// The caption's first clause (the data) in the figure; the whole caption goes to NAME.txt.
std::string caption_label(const std::string& caption) {
  const std::string shown = caption.substr(0, caption.find(';'));
  return "set bmargin 6\nset label 99 " + quoted(shown) + " at screen 0.01, screen 0.02 left font ',8'\n";
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

std::string ranks_axis(const std::vector<BenchGroup>& groups) {
  std::set<double> ranks;
  for (const auto& g : groups)
    for (const auto& r : g.rows) ranks.insert(r.ranks);
  std::string tics;
  for (double r : ranks) tics += (tics.empty() ? "" : ", ") + fmt(r);
  const double lo = *ranks.begin(), hi = *ranks.rbegin();
  return "set xlabel 'devices (ranks)'\nset xrange [" + fmt(lo / 1.4) + ":" + fmt(hi * 1.4) +
         "]\nset logscale x 2\nset xtics (" + tics + ")\nset grid\n";
}

Figure throughput_figure(const Inputs& in) {
  std::string caption = join(std::set<std::string, ShortFirst>(in.bench_captions.begin(), in.bench_captions.end()), "; ");
  std::string b;
  std::string plot = "plot ";
  for (size_t i = 0; i < in.bench.size(); ++i) {
    const BenchGroup& g = in.bench[i];
    std::vector<std::vector<double>> rows;
    const BenchRow& first = g.rows.front();
    for (const auto& r : g.rows) rows.push_back({r.ranks, r.images_per_s, first.images_per_s * r.ranks / first.ranks});
    b += datablock(std::string("t").append(std::to_string(i)), rows);
    const std::string lc = " lc " + std::to_string(i + 1);
    plot += std::string(i ? ", \\\n  " : "") + "$t" + std::to_string(i) + " using 1:2 with linespoints lw 2 pt 7" +
            lc + " title " + quoted(g.label) + ", \\\n  $t" + std::to_string(i) + " using 1:3 with lines dt 2" + lc +
            " title " + quoted(g.label + " ideal (first point x k/k0)");
  }
  b += "set title 'Throughput against devices'\n" + ranks_axis(in.bench) +
       "set ylabel 'throughput (images/s)'\nset yrange [0:*]\nset key top left\n" + caption_label(caption) + plot +
       "\n";
  return {"throughput", b, caption};
}

std::vector<Figure> phases_figures(const Inputs& in) {
  std::vector<Figure> out;
  for (const BenchGroup& g : in.bench) {
    std::vector<std::vector<double>> rows;
    std::string xtics = "set xtics (";
    for (size_t i = 0; i < g.rows.size(); ++i) {
      const BenchRow& r = g.rows[i];
      rows.push_back({static_cast<double>(i), r.load * 1e3, r.forward * 1e3, r.backward * 1e3,
                      std::max(0.0, r.comm_exposed - r.wait) * 1e3,
                      r.optimizer * 1e3, r.wait * 1e3, r.step * 1e3});
      xtics += std::string(i ? ", " : "") + quoted(fmt(r.ranks)) + " " + std::to_string(i);
    }
    const std::string caption = g.run + "; the bars stack the mean phase times of a step, "
                                "exposed communication is mean_comm_exposed_s less the wait for the slowest rank, which "
                                "lies inside it (README: Phases)";
    std::string b = datablock("p", rows);
    b += "set title " + quoted("Step time by phase: " + g.label) +
         "\nset xlabel 'devices (ranks)'\nset ylabel 'time per step (ms)'\nset yrange [0:*]\n"
         "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.8 border -1\n"
         "set boxwidth 0.6\nset key outside right top\nset grid y\nset offsets 0, 0, graph 0.08, 0\n" +
         xtics + ")\n" + caption_label(caption);
    const char* names[] = {"load + h2d", "forward", "backward", "exposed communication (less wait)", "optimizer",
                           "wait for the slowest rank"};
    b += "plot ";
    for (int c = 0; c < 6; ++c)
      b += std::string(c ? ", " : "") + "$p using " + std::to_string(c + 2) + " title " + quoted(names[c]);
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
    b += "set title " + quoted("Efficiency against devices: " + g.label) + "\n" + ranks_axis({g}) +
         "set ylabel 'efficiency (fraction, 1 = ideal)'\nset yrange [0:1.1]\nset key bottom left\n" +
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
              quoted(fig.series[i].label);
    }
    const std::string caption = fig.run + "; out-of-place rows, busbw as nccl-tests defines it";
    b += "set title " + quoted("Bus bandwidth: " + fig.collective) +
         "\nset xlabel 'message size (bytes)'\nset logscale x 2\nset format x '%.0b%B'\n"
         "set ylabel 'bus bandwidth (GB/s)'\nset yrange [0:*]\nset grid\nset key top left\n" +
         caption_label(caption) + plot + "\n";
    out.push_back({"busbw-" + slug(fig.key), b, caption});
  }
  return out;
}

}  // namespace

const std::vector<PlotFigureInfo>& plot_figures() {
  static const std::vector<PlotFigureInfo> figures = {
      {"throughput", "images/s against devices, a line per model and batch size, with ideal scaling",
       "a dpx bench folder (results.csv), e.g. dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 "
       "--dataset synthetic --out runs/bench"},
      {"phases", "step time against devices as stacked phases, one figure per model and batch size",
       "a dpx bench folder (results.csv), e.g. dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 "
       "--dataset synthetic --out runs/bench"},
      {"busbw", "bus bandwidth against message size (log x), a line per algorithm and backend, one figure per "
                "collective",
       "a dpx collective --csv file, e.g. dpx collective --algo all -b 1K -e 64M -f 4 --csv c.csv"},
      {"efficiency", "scaling efficiency and POP load balance, communication and parallel efficiency against ranks",
       "a dpx bench folder (results.csv), e.g. dpx bench --models lenet5 --batch-sizes 8 --devices cpu:1,2,4 "
       "--dataset synthetic --out runs/bench"},
  };
  return figures;
}


std::vector<std::string> make_plots(const PlotOptions& o) {
  // Every check before anything is written: the figures named, the inputs, gnuplot.
  std::vector<std::string> wanted = o.figures;
  for (const std::string& w : wanted) {
    bool known = false;
    for (const auto& f : plot_figures()) known = known || f.name == w;
    if (!known) {
      std::string names;
      for (const auto& f : plot_figures()) names += (names.empty() ? "" : ", ") + std::string(f.name);
      usage_fail("--figure: no figure '", w, "': choose from ", names, " (dpx plot --list)");
    }
  }
  const Inputs in = read_inputs(o.inputs);
  const bool bench = !in.bench.empty(), coll = !in.collectives.empty();
  if (wanted.empty()) {
    for (const auto& f : plot_figures())
      if (f.name == "busbw" ? coll : bench) wanted.emplace_back(f.name);
  }
  for (const std::string& w : wanted) {
    if (w == "busbw" && !coll)
      usage_fail("busbw needs a dpx collective --csv file among the inputs: ", kCollectiveRun);
    if (w != "busbw" && !bench) usage_fail(w, " needs a dpx bench folder among the inputs: ", kBenchRun);
  }
  const std::string gnuplot = find_executable(o.gnuplot);
  if (gnuplot.empty())
    fail("dpx plot draws with gnuplot, and '", o.gnuplot,
         "' was not found: install the Debian package gnuplot-nox (apt-get install gnuplot-nox), or name it with "
         "--gnuplot PATH");

  std::vector<Figure> figures;
  for (const std::string& w : wanted) {
    std::vector<Figure> add;
    if (w == "throughput") add.push_back(throughput_figure(in));
    if (w == "phases") add = phases_figures(in);
    if (w == "busbw") add = busbw_figures(in);
    if (w == "efficiency") add = efficiency_figures(in);
    figures.insert(figures.end(), add.begin(), add.end());
  }

  // Two inputs whose folders or files share a name would give two figures one name.
  std::map<std::string, int> stems;
  for (Figure& f : figures)
    if (const int n = ++stems[f.stem]; n > 1) f.stem += "-" + std::to_string(n);

  ensure_writable_dir(o.out_dir, "--out");
  const std::string tmp = ".tmp." + std::to_string(::getpid()) + ".0";
  const fs::path dir(o.out_dir.empty() ? "." : o.out_dir);
  std::vector<std::string> temporaries;
  auto clean = [&] {
    std::error_code ec;
    for (const auto& t : temporaries) fs::remove(t, ec);
  };
  try {
    const std::string size = std::to_string(o.width_px) + "," + std::to_string(o.height_px);
    for (const Figure& f : figures) {
      const std::string png = (dir / (f.stem + ".png" + tmp)).string();
      const std::string svg = (dir / (f.stem + ".svg" + tmp)).string();
      const std::string script = (dir / (f.stem + ".gp" + tmp)).string();
      const std::string log = (dir / (f.stem + ".log" + tmp)).string();
      temporaries.insert(temporaries.end(), {png, svg, script, log});
      {
        std::ofstream s(script);
        s << "# dpx plot: " << f.stem << "\n" << "set terminal pngcairo size " << size
          << " noenhanced font 'sans,10'\nset output " << quoted(png) << "\n"
          << f.body << "set terminal svg size " << size
          << " noenhanced font 'sans,10' background '#ffffff'\nset output " << quoted(svg)
          << "\nreplot\nunset output\n";
        if (!s.flush()) fail("dpx plot: cannot write the gnuplot script '", script, "'");
      }
      const int rc = run_gnuplot(gnuplot, script, log);
      if (rc != 0 || !fs::exists(png) || !fs::exists(svg) || fs::file_size(png) == 0)
        fail("dpx plot: gnuplot (", gnuplot, ") failed drawing ", f.stem, " (exit status ", rc, "): ",
             file_text_of(log));
    }
  } catch (...) {
    clean();
    throw;
  }
  std::vector<std::string> written;
  for (const Figure& f : figures) {
    for (const char* ext : {".png", ".svg"}) {
      const fs::path final = dir / (f.stem + ext);
      fs::rename(dir / (f.stem + ext + tmp), final);
      written.push_back(final.string());
    }
    write_file_atomic((dir / (f.stem + ".txt")).string(), f.stem + ": " + f.caption + "\n", "--out");
    written.push_back((dir / (f.stem + ".txt")).string());
  }
  clean();
  return written;
}

}  // namespace dpx::analysis
