// dpx plot's layout rules (analysis/plot_data.hpp), read from the figures' gnuplot scripts: a
// legend never lies over the data (a single plot keeps it outside, right; a panel of small
// multiples raises its y range by the legend's share of the panel), and a crowded figure becomes
// a panel per model.
#include <doctest/doctest.h>

#include <set>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

#include "analysis/plot_data.hpp"

namespace plot = dpx::analysis::plot;

namespace {

// `models` models x `configs` configurations each, measured on 1 and 2 ranks.
plot::Inputs crowded(int models, int configs) {
  plot::Inputs in;
  for (int m = 0; m < models; ++m)
    for (int c = 0; c < configs; ++c) {
      plot::BenchGroup g;
      g.model_name = g.model = g.base_model = "model" + std::to_string(m);
      g.label = g.model + " config " + std::to_string(c);
      g.slug = g.model + "-c" + std::to_string(c);
      g.run = "data: test";
      g.batch = 8;
      g.axes = {{"model", g.model}, {"algo", "algo " + std::to_string(c)}};
      for (double k : {1.0, 2.0}) {
        plot::BenchRow r;
        r.ranks = k;
        r.images_per_s = 100 * k;
        r.step = r.forward = 0.01;
        r.scaling_efficiency = r.load_balance = r.comm_efficiency = r.parallel_efficiency = 0.9;
        r.bytes_per_epoch_formula = r.bytes_per_epoch_counted = k > 1 ? 1e6 : 0;
        g.rows.push_back(r);
      }
      in.bench.push_back(g);
    }
  in.bench_captions.push_back("data: test");
  return in;
}

// Every "set key" of a script: outside, or inside a panel whose range makes room for it.
void check_keys(const plot::Figure& f) {
  CAPTURE(f.stem);
  std::istringstream lines(f.body);
  const bool panels = f.body.find("set multiplot") != std::string::npos;
  int keys = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("set key", 0) != 0) continue;
    ++keys;
    CAPTURE(line);
    if (panels) {
      CHECK(line.find("top") != std::string::npos);
      std::string next;
      REQUIRE(std::getline(lines, next));
      CHECK(next.rfind("set offsets 0, 0, graph ", 0) == 0);
    } else {
      CHECK(line.find("outside") != std::string::npos);
    }
  }
  CHECK(keys >= 1);
}

}  // namespace

TEST_CASE("every figure keeps its legend off the data, in one plot or in panels") {
  for (auto [models, configs] : {std::pair{1, 3}, std::pair{2, 4}}) {
    CAPTURE(models);
    const plot::Inputs in = crowded(models, configs);
    plot::FigureOptions o;
    std::vector<plot::Figure> figures = {plot::throughput_figure(in, o), plot::best_devices_figure(in, o),
                                         plot::bytes_per_epoch_figure(in), plot::scaling_figure(in, o)};
    for (auto f : {plot::phases_figures(in), plot::efficiency_figures(in), plot::comm_compute_figures(in)})
      figures.insert(figures.end(), f.begin(), f.end());
    for (const plot::Figure& f : figures) check_keys(f);
    // Two models of four: 8 throughput and scaling lines and 16 bytes lines, past six: a panel per model.
    const bool crowded_figures = models > 1;
    for (size_t f : {0, 2, 3}) {
      CAPTURE(figures[f].stem);
      CHECK((figures[f].body.find("set multiplot") != std::string::npos) == crowded_figures);
    }
  }
}

namespace {

// The titled series of each plot command of a script, as (colour 1..8, point, dash): gnuplot
// has 8 colours, so "lc 9" draws as "lc 1".
std::vector<std::vector<std::tuple<int, int, int>>> series_styles(const std::string& body) {
  auto number_after = [](const std::string& s, const std::string& key, int otherwise) {
    const size_t at = s.find(key);
    return at == std::string::npos ? otherwise : std::stoi(s.substr(at + key.size()));
  };
  std::vector<std::vector<std::tuple<int, int, int>>> plots;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("plot ", 0) != 0) continue;
    std::string command = line;  // it runs on over lines that end in a backslash
    while (!command.empty() && command.back() == '\\' && std::getline(lines, line)) command.back() = ' ', command += line;
    plots.emplace_back();
    std::istringstream parts(command.substr(5));
    for (std::string part; std::getline(parts, part, ',');) {
      if (part.find(" title ") == std::string::npos || part.find(" lc ") == std::string::npos ||
          part.find("lc rgb") != std::string::npos)
        continue;
      plots.back().emplace_back((number_after(part, " lc ", 1) - 1) % 8 + 1, number_after(part, " pt ", 0),
                                number_after(part, " dt ", 1));
    }
  }
  return plots;
}

}  // namespace

// gnuplot has 8 line colours: a 9th series drawn as the 1st cannot be told from it.
TEST_CASE("no two series of a plot look alike, past gnuplot's 8 colours too") {
  const plot::Inputs in = crowded(1, 12);  // one model: one plot of 12 series, no panels
  plot::FigureOptions o;
  for (const plot::Figure& f : {plot::throughput_figure(in, o), plot::scaling_figure(in, o),
                                plot::bytes_per_epoch_figure(in, o)}) {
    CAPTURE(f.stem);
    const auto plots = series_styles(f.body);
    REQUIRE(plots.size() == 1);
    CHECK(plots[0].size() >= 12);
    const std::set<std::tuple<int, int, int>> distinct(plots[0].begin(), plots[0].end());
    CHECK(distinct.size() == plots[0].size());
  }
}

TEST_CASE("a panel's legend gets room in proportion to its lines, and more in smaller panels") {
  auto offset = [](size_t entries, size_t panels) {
    const std::string s = plot::panel_key(entries, panels);
    const size_t at = s.find("graph ");
    REQUIRE(at != std::string::npos);
    return std::stod(s.substr(at + 6));
  };
  CHECK(offset(2, 2) > 0);
  CHECK(offset(8, 2) > offset(4, 2));
  CHECK(offset(4, 4) > offset(4, 2));  // two rows of panels: each half as tall
  CHECK(offset(100, 2) <= 1.5 + 1e-9);  // at most 60 % of the panel: the data keeps 40 %
}
