// `dpx fit` (see fit.hpp): reading the measurements, the weighted non-negative least squares,
// the collective and overhead fits, and their text and JSON forms.
#include "analysis/fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <tuple>

#include "analysis/cost_model.hpp"
#include "analysis/csv_table.hpp"
#include "core/error.hpp"
#include "core/input_files.hpp"

namespace dpx::analysis {

namespace {

constexpr int kFormatVersion = 1;

// Solves the k x k system a z = b by Gaussian elimination with partial pivoting; false when a
// pivot vanishes (the columns are dependent).
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>& z) {
  const size_t k = b.size();
  for (size_t c = 0; c < k; ++c) {
    size_t pivot = c;
    for (size_t r = c + 1; r < k; ++r)
      if (std::abs(a[r][c]) > std::abs(a[pivot][c])) pivot = r;
    if (std::abs(a[pivot][c]) < 1e-10) return false;  // columns are scaled to norm 1
    std::swap(a[c], a[pivot]);
    std::swap(b[c], b[pivot]);
    for (size_t r = c + 1; r < k; ++r) {
      const double f = a[r][c] / a[c][c];
      for (size_t j = c; j < k; ++j) a[r][j] -= f * a[c][j];
      b[r] -= f * b[c];
    }
  }
  z.assign(k, 0);
  for (size_t c = k; c-- > 0;) {
    double s = b[c];
    for (size_t j = c + 1; j < k; ++j) s -= a[c][j] * z[j];
    z[c] = s / a[c][c];
  }
  return true;
}

// Unbounded weighted least squares over the columns in `free` (others 0).
bool solve_free(const std::vector<std::vector<double>>& x, const std::vector<double>& y, const std::vector<double>& w,
                const std::vector<size_t>& free, std::vector<double>& coef) {
  const size_t k = free.size();
  // Columns scaled to unit weighted norm, so that alpha (~1e-6 s) and beta (~1e-10 s/B) columns
  // of very different magnitudes do not spoil the elimination.
  std::vector<double> scale(k, 0);
  for (size_t j = 0; j < k; ++j) {
    for (size_t i = 0; i < y.size(); ++i) scale[j] += std::pow(w[i] * x[i][free[j]], 2);
    scale[j] = std::sqrt(scale[j]);
    if (scale[j] == 0) return false;
  }
  std::vector<std::vector<double>> a(k, std::vector<double>(k, 0));
  std::vector<double> b(k, 0);
  for (size_t i = 0; i < y.size(); ++i)
    for (size_t j = 0; j < k; ++j) {
      const double xj = w[i] * x[i][free[j]] / scale[j];
      b[j] += xj * w[i] * y[i];
      for (size_t m = 0; m < k; ++m) a[j][m] += xj * w[i] * x[i][free[m]] / scale[m];
    }
  std::vector<double> z;
  if (!solve(a, b, z)) return false;
  coef.assign(x.front().size(), 0);
  for (size_t j = 0; j < k; ++j) coef[free[j]] = z[j] / scale[j];
  return true;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}


bool is_collective_csv(const CsvTable& t) { return t.has("collective") && t.has("time_us") && t.has("algo"); }
bool is_bench_csv(const CsvTable& t) { return t.has("trainable_params") && t.has("mean_comm_total_s"); }

void read_collective_rows(const CsvTable& t, std::vector<CollectivePoint>& out, int& skipped_wrong) {
    const size_t coll = t.column("collective"), algo = t.column("algo"), backend = t.column("backend"),
               ranks = t.column("ranks"), bytes = t.column("bytes"), count = t.column("count"),
               time = t.column("time_us"), wrong = t.column("wrong"), placement = t.column("placement");
  const bool has_nodes = t.has("nodes"), has_limit = t.has("limit_source");
  for (size_t r = 0; r < t.rows(); ++r) {
    if (t.number(r, wrong) > 0) {
      ++skipped_wrong;
      continue;
    }
    CollectivePoint p;
    p.collective = t.text(r, coll);
    p.algo = t.text(r, algo);
    p.backend = t.text(r, backend);
    p.in_place = t.text(r, placement) == "in";
    const double k = t.number(r, ranks);
    if (k < 1 || k != std::floor(k) || k > 1e7)
      usage_fail("'", t.path(), "' line ", t.line_of(r), ": ranks ", k, " is not a number of ranks");
    p.ranks = static_cast<int>(k);
    p.nodes = has_nodes ? std::max(1, static_cast<int>(t.number(r, t.column("nodes")))) : 1;
    p.memory = has_limit && t.text(r, t.column("limit_source")) == "memcpy";
    p.bytes = t.number(r, bytes);
    p.count = t.number(r, count);
    if (p.bytes < 0 || p.count < 0)
      usage_fail("'", t.path(), "' line ", t.line_of(r), ": a negative size");
    p.time_s = t.number(r, time) * 1e-6;
    if (!(p.time_s > 0))
      usage_fail("'", t.path(), "' line ", t.line_of(r), ": time_us ", t.text(r, time),
                 " is not a positive time: the file is damaged, or not what dpx collective measured");
    out.push_back(std::move(p));
  }
}

void read_bench_rows(const CsvTable& t, std::vector<OverheadPoint>& out) {
  const size_t model = t.column("model"), parallel = t.column("parallel"), algo = t.column("algo"),
               ranks = t.column("ranks"), devices = t.column("devices"), params = t.column("trainable_params"),
               comm = t.column("mean_comm_total_s"), exposed = t.column("mean_comm_exposed_s");
  for (size_t r = 0; r < t.rows(); ++r) {
    OverheadPoint p;
    p.model = t.text(r, model);
    p.parallel = t.text(r, parallel);
    p.algo = t.text(r, algo);
    p.devices = t.text(r, devices);
    p.ranks = static_cast<int>(t.number(r, ranks));
    p.params = t.number(r, params);
    p.comm_s = t.number(r, comm);
    p.exposed_s = t.number(r, exposed);
    if (t.has("bucket_mb")) p.bucket_mb = t.number(r, t.column("bucket_mb"));
    if (t.has("accumulate")) p.accumulate = static_cast<int>(t.number(r, t.column("accumulate")));
    if (p.ranks < 1 || p.params < 0 || p.comm_s < 0 || p.exposed_s < 0)
      usage_fail("'", t.path(), "' line ", t.line_of(r), ": a negative time, size or rank count");
    if (p.ranks < 2) continue;  // one replica communicates nothing
    out.push_back(std::move(p));
  }
}

// The order in which a reduction looks for beta on its backend: sendrecv, then the same
// algorithm's all_gather and broadcast, then any collective that does not reduce.
int beta_source_rank(const CollectiveFit& source, const CollectiveFit& reduction) {
  if (source.collective == "sendrecv") return 0;
  if (source.algo == reduction.algo && source.collective == "all_gather") return 1;
  if (source.algo == reduction.algo && source.collective == "broadcast") return 2;
  return 3;
}

using CollectiveKey = std::tuple<std::string, std::string, std::string, bool, int>;

CollectiveFit fit_one(const CollectiveKey& key, const std::vector<const CollectivePoint*>& pts,
                    const CollectiveFit* beta_source) {
  CollectiveFit f;
  std::tie(f.collective, f.algo, f.backend, f.in_place, f.ranks) = key;
  f.points = static_cast<int>(pts.size());
  std::set<double> sizes;
  f.bytes_min = f.bytes_max = pts.front()->bytes;
  f.ranks_min = f.ranks_max = pts.front()->ranks;
  f.memory_only = true;
  for (const CollectivePoint* p : pts) {
    f.memory_only = f.memory_only && p->memory;
    sizes.insert(p->bytes);
    f.bytes_min = std::min(f.bytes_min, p->bytes);
    f.bytes_max = std::max(f.bytes_max, p->bytes);
    f.ranks_min = std::min(f.ranks_min, p->ranks);
    f.ranks_max = std::max(f.ranks_max, p->ranks);
  }
  f.sizes = static_cast<int>(sizes.size());
  const bool library = f.ranks > 0;
  const bool gamma = !library && reduces(f.collective) && beta_source;
  f.formula = library ? "a + n b (the library's own algorithm; this rank count only)" : cost_formula(f.collective, f.algo);
  if (!library && reduces(f.collective) && !beta_source)
    f.note = "beta includes the reduction: gamma needs a collective that does not reduce (e.g. -t sendrecv) on this "
             "backend in the same fit";
  std::vector<std::vector<double>> x;
  std::vector<double> y, w;
  for (const CollectivePoint* p : pts) {
    CostTerms t{1, p->bytes, 0};
    if (!library) t = *cost_terms(p->collective, p->algo, CallShape{p->bytes, p->count, p->ranks, p->nodes});
    if (t.messages == 0 && t.bytes == 0) continue;  // one rank: nothing to fit
    double target = p->time_s;
    if (gamma) {
      target -= t.bytes * beta_source->beta_s_per_byte;
      x.push_back({t.messages, t.reduced_bytes});
    } else {
      x.push_back({t.messages, t.bytes});
    }
    y.push_back(target);
    w.push_back(1 / p->time_s);
  }
  const size_t params = 2;
  if (x.size() < params + 2 || sizes.size() < 2) {
    f.reason = detail::concat("too few points: ", x.size(), " measurement", x.size() == 1 ? "" : "s", " at ",
                              sizes.size(), " size", sizes.size() == 1 ? "" : "s",
                              "; a fit needs at least 4 at 2 sizes or more (widen -b/-e, e.g. -b 8 -e 64M -f 4)");
    return f;
  }
  const LeastSquares ls = fit_least_squares(x, y, w);
  if (ls.coef.empty()) {
    f.reason = "the sizes and rank counts measured cannot tell the latency from the bandwidth term: measure more "
               "sizes";
    return f;
  }
  f.alpha_s = ls.coef[0];
  if (gamma) {
    f.beta_s_per_byte = beta_source->beta_s_per_byte;
    f.gamma_s_per_byte = ls.coef[1];
    f.has_gamma = true;
    f.beta_from = beta_source->name();
  } else {
    f.beta_s_per_byte = ls.coef[1];
  }
  // Quality on the times themselves, whatever was moved to the left-hand side.
  double mean = 0;
  for (const CollectivePoint* p : pts) mean += p->time_s;
  mean /= static_cast<double>(pts.size());
  double ss_res = 0, ss_tot = 0;
  for (const CollectivePoint* p : pts) {
    CostTerms t{1, p->bytes, 0};
    if (!library) t = *cost_terms(p->collective, p->algo, CallShape{p->bytes, p->count, p->ranks, p->nodes});
    const double model = t.seconds(f.alpha_s, f.beta_s_per_byte, f.has_gamma ? f.gamma_s_per_byte : 0);
    ss_res += std::pow(p->time_s - model, 2);
    ss_tot += std::pow(p->time_s - mean, 2);
    f.max_rel_residual = std::max(f.max_rel_residual, std::abs(p->time_s - model) / p->time_s);
  }
  f.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : (ss_res <= 1e-30 ? 1 : 0);
  const char* names[] = {"alpha", gamma ? "gamma" : "beta"};
  for (size_t j = 0; j < 2; ++j)
    if (ls.at_zero[j]) f.note += std::string(f.note.empty() ? "" : "; ") + names[j] + " held at 0 (the data put it below zero)";
  if (f.r2 < kMinR2) {
    f.reason = detail::concat("poor fit: R^2 ", fmt("%.3f", f.r2), " < ", kMinR2, ", largest residual ",
                              fmt("%.0f", f.max_rel_residual * 100), " %: the model does not describe these times "
                              "(noisy runs? repeat with more -n iterations, or on a quieter machine)");
  } else {
    f.ok = true;
  }
  return f;
}

// One fit over every point; if that is poor, the widest window of consecutive sizes (3 or more)
// that one alpha-beta line does describe, the larger sizes first (caches make small messages
// faster per byte than large ones, and predictions need the large ones).
CollectiveFit fit_group(const CollectiveKey& key, const std::vector<const CollectivePoint*>& pts,
                        const CollectiveFit* beta_source) {
  CollectiveFit all = fit_one(key, pts, beta_source);
  if (all.ok || all.reason.rfind("poor fit", 0) != 0) return all;
  std::vector<double> sizes;
  for (const CollectivePoint* p : pts) sizes.push_back(p->bytes);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const int m = static_cast<int>(sizes.size());
  for (int width = m - 1; width >= 3; --width)
    for (int first = m - width; first >= 0; --first) {
      const double lo = sizes[static_cast<size_t>(first)], hi = sizes[static_cast<size_t>(first + width - 1)];
      std::vector<const CollectivePoint*> window;
      for (const CollectivePoint* p : pts)
        if (p->bytes >= lo && p->bytes <= hi) window.push_back(p);
      CollectiveFit f = fit_one(key, window, beta_source);
      if (!f.ok) continue;
      f.note += std::string(f.note.empty() ? "" : "; ") + "valid for " + size_text(lo) + " .. " + size_text(hi) +
                " only: over all " + std::to_string(m) + " sizes R^2 was " + fmt("%.3f", all.r2) +
                " (caches and memory differ in bandwidth)";
      return f;
    }
  return all;
}

}  // namespace

std::string size_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return fmt(bytes == std::floor(bytes) ? "%.0f " : "%.3g ", bytes) + units[u];
}

std::string rate_text(double s_per_byte) {
  if (s_per_byte <= 0) return "unbounded";
  const double bps = 1 / s_per_byte;
  return bps >= 1e9 ? fmt("%.3g GB/s", bps / 1e9) : bps >= 1e6 ? fmt("%.3g MB/s", bps / 1e6) : fmt("%.3g kB/s", bps / 1e3);
}

std::string time_text(double s) {
  return s >= 1 ? fmt("%.3g s", s) : s >= 1e-3 ? fmt("%.3g ms", s * 1e3) : fmt("%.3g us", s * 1e6);
}

std::string CollectiveFit::name() const {
  std::string n = collective + " " + algo + " (" + backend + (in_place ? ", in place" : "");
  if (ranks > 0) n += ", " + std::to_string(ranks) + " ranks";
  return n + ")";
}

LeastSquares fit_least_squares(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                               const std::vector<double>& w) {
  LeastSquares out;
  if (x.empty() || x.front().empty()) return out;
  const size_t k = x.front().size();
  std::vector<size_t> free;
  for (size_t j = 0; j < k; ++j) free.push_back(j);
  std::vector<double> coef;
  out.at_zero.assign(k, false);
  // Active set: a coefficient the data put below zero is held at zero and the rest refitted.
  while (!free.empty()) {
    if (!solve_free(x, y, w, free, coef)) return out;
    auto worst = std::min_element(free.begin(), free.end(), [&](size_t a, size_t b) { return coef[a] < coef[b]; });
    if (coef[*worst] >= 0) break;
    out.at_zero[*worst] = true;
    free.erase(worst);
  }
  if (free.empty()) coef.assign(k, 0);
  out.coef = coef;
  double mean = 0;
  for (double v : y) mean += v;
  mean /= static_cast<double>(y.size());
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    double f = 0;
    for (size_t j = 0; j < k; ++j) f += coef[j] * x[i][j];
    ss_res += (y[i] - f) * (y[i] - f);
    ss_tot += (y[i] - mean) * (y[i] - mean);
    if (y[i] != 0) out.max_rel_residual = std::max(out.max_rel_residual, std::abs(y[i] - f) / std::abs(y[i]));
  }
  out.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : (ss_res <= 1e-30 ? 1 : 0);
  return out;
}

std::vector<CollectiveFit> fit_collectives(const std::vector<CollectivePoint>& points) {
  // Groups: dpx's algorithms over every rank count; the library's per rank count.
  std::map<CollectiveKey, std::vector<const CollectivePoint*>> groups;
  for (const CollectivePoint& p : points) {
    const bool known = cost_terms(p.collective, p.algo, CallShape{1, 1, 2, 1}).has_value();
    groups[{p.collective, p.algo, p.backend, p.in_place, known ? 0 : p.ranks}].push_back(&p);
  }
  std::vector<CollectiveFit> fits;
  // Collectives that do not reduce first: the reductions take beta from them.
  for (const auto& [key, pts] : groups)
    if (!reduces(std::get<0>(key))) fits.push_back(fit_group(key, pts, nullptr));
  for (const auto& [key, pts] : groups) {
    if (!reduces(std::get<0>(key))) continue;
    CollectiveFit probe;
    std::tie(probe.collective, probe.algo, probe.backend, probe.in_place, probe.ranks) = key;
    const CollectiveFit* source = nullptr;
    for (const CollectiveFit& f : fits)
      // beta from a collective that does not reduce, on the same backend, in the same placement
      if (f.ok && f.ranks == 0 && !reduces(f.collective) && f.backend == probe.backend && f.in_place == probe.in_place &&
          (!source || beta_source_rank(f, probe) < beta_source_rank(*source, probe)))
        source = &f;
    // fits grows below while `source` points into it: copy first.
    const CollectiveFit copy = source ? *source : CollectiveFit{};
    fits.push_back(fit_group(key, pts, source ? &copy : nullptr));
  }
  return fits;
}

std::vector<OverheadFit> fit_overheads(const std::vector<OverheadPoint>& points) {
  using Key = std::tuple<std::string, std::string, int, double, int>;
  std::map<Key, std::vector<const OverheadPoint*>> groups;
  for (const OverheadPoint& p : points)
    groups[{p.parallel, p.algo, p.ranks, p.bucket_mb, p.accumulate}].push_back(&p);
  std::vector<OverheadFit> fits;
  for (const auto& [key, pts] : groups)
    for (const char* target : {"comm_total", "comm_exposed"})
      for (int degree : {1, 2}) {
        OverheadFit f;
        std::tie(f.parallel, f.algo, f.ranks, f.bucket_mb, f.accumulate) = key;
        f.target = target;
        f.kind = degree == 1 ? "linear" : "quadratic";
        f.points = static_cast<int>(pts.size());
        std::set<std::string> models;
        std::set<double> params;
        std::vector<std::vector<double>> x;
        std::vector<double> y, w;
        double ymax = 0;
        for (const OverheadPoint* p : pts) {
          const double v = f.target == "comm_total" ? p->comm_s : p->exposed_s;
          ymax = std::max(ymax, v);
        }
        for (const OverheadPoint* p : pts) {
          models.insert(p->model);
          params.insert(p->params);
          const double v = f.target == "comm_total" ? p->comm_s : p->exposed_s;
          const double P = p->params / 1e6;  // millions: keeps the columns near 1
          x.push_back(degree == 1 ? std::vector<double>{1, P} : std::vector<double>{1, P, P * P});
          y.push_back(v);
          w.push_back(1 / std::max(v, 1e-3 * ymax + 1e-12));  // relative, a zero time bounded
        }
        f.models = static_cast<int>(models.size());
        f.params_min = *params.begin();
        f.params_max = *params.rbegin();
        const size_t need = static_cast<size_t>(degree) + 2;
        if (params.size() < need) {
          f.reason = detail::concat("too few models: ", params.size(), " model size", params.size() == 1 ? "" : "s",
                                    "; a ", f.kind, " fit needs ", need, " or more (bench more --models)");
          fits.push_back(f);
          continue;
        }
        const LeastSquares ls = fit_least_squares(x, y, w);
        if (ls.coef.empty()) {
          f.reason = "the model sizes measured cannot determine the coefficients";
          fits.push_back(f);
          continue;
        }
        f.coef = ls.coef;
        for (size_t j = 1; j < f.coef.size(); ++j) f.coef[j] /= std::pow(1e6, static_cast<double>(j));
        for (size_t j = 0; j < ls.at_zero.size(); ++j)
          if (ls.at_zero[j]) f.note += std::string(f.note.empty() ? "" : ", ") + "c" + std::to_string(j);
        if (!f.note.empty()) f.note += " held at 0 (the data put it below zero)";
        f.r2 = ls.r2;
        f.max_rel_residual = ls.max_rel_residual;
        if (f.r2 < kMinR2)
          f.reason = detail::concat("poor fit: R^2 ", fmt("%.3f", f.r2), " < ", kMinR2,
                                    ": communication time is not a ", f.kind, " function of the parameters here");
        else
          f.ok = true;
        fits.push_back(f);
      }
  return fits;
}

FitResult fit_files(const std::vector<std::string>& paths) {
  if (paths.empty()) usage_fail("dpx fit: name one or more files (dpx collective --csv files, dpx bench results.csv)");
  FitResult r;
  std::vector<CollectivePoint> collective;
  std::vector<OverheadPoint> overhead;
  for (const std::string& path : paths) {
    const CsvTable t = CsvTable::read(path, "dpx fit");
    if (is_collective_csv(t)) {
      read_collective_rows(t, collective, r.skipped_wrong);
    } else if (is_bench_csv(t)) {
      read_bench_rows(t, overhead);
    } else {
      std::string header;
      for (const std::string& h : t.header()) header += (header.empty() ? "" : ",") + h;
      usage_fail("dpx fit: '", path, "' is neither a dpx collective --csv file nor a dpx bench results.csv (its "
                 "header: ", excerpt(header), ")");
    }
    if (t.rows() == 0) usage_fail("dpx fit: '", path, "' has a header but no measurements");
    r.sources.push_back(path);
  }
  if (collective.empty() && overhead.empty())
    usage_fail("dpx fit: nothing to fit: every row was left out (wrong values, or runs of one rank)");
  r.collectives = fit_collectives(collective);
  r.overheads = fit_overheads(overhead);
  return r;
}

void print_fits(std::ostream& os, const FitResult& r) {
  if (r.skipped_wrong > 0)
    os << "# left out: " << r.skipped_wrong << " measurement" << (r.skipped_wrong == 1 ? "" : "s")
       << " with wrong values (#wrong > 0)\n";
  if (!r.collectives.empty()) {
    os << "# Collectives: T = a alpha + b beta + c gamma (a, b, c: the algorithm's cost terms; "
          "docs/predicting.md)\n";
    char line[400];
    std::snprintf(line, sizeof line, "# %-40s %10s %12s %12s %7s %7s %6s  %s\n", "collective algo (backend)", "alpha",
                  "1/beta", "1/gamma", "R^2", "maxres", "points", "valid for");
    os << line;
    for (const CollectiveFit& f : r.collectives) {
      if (!f.ok) {
        std::snprintf(line, sizeof line, "  %-40s %s\n", f.name().c_str(), ("no fit: " + f.reason).c_str());
        os << line;
        continue;
      }
      const std::string range = size_text(f.bytes_min) + " .. " + size_text(f.bytes_max) + ", " +
                                std::to_string(f.ranks_min) + (f.ranks_max > f.ranks_min ? ".." + std::to_string(f.ranks_max) : "") +
                                " ranks";
      std::snprintf(line, sizeof line, "  %-40s %10s %12s %12s %7.4f %6.1f%% %6d  %s\n", f.name().c_str(),
                    time_text(f.alpha_s).c_str(), rate_text(f.beta_s_per_byte).c_str(),
                    f.has_gamma ? rate_text(f.gamma_s_per_byte).c_str() : "-", f.r2, f.max_rel_residual * 100, f.points,
                    range.c_str());
      os << line << "      T = " << f.formula << "\n";
      if (!f.beta_from.empty()) os << "      beta from " << f.beta_from << "\n";
      if (!f.note.empty()) os << "      note: " << f.note << "\n";
    }
  }
  if (!r.overheads.empty()) {
    os << "# Communication overhead per step against trainable parameters P (dpx bench results)\n";
    for (const OverheadFit& f : r.overheads) {
      char line[400];
      std::snprintf(line, sizeof line, "  %-4s %-5s %3d ranks  bucket %g MiB  accumulate %d  %-12s %-9s ", f.parallel.c_str(),
                    f.algo.c_str(), f.ranks, f.bucket_mb, f.accumulate,
                    f.target.c_str(), f.kind.c_str());
      os << line;
      if (!f.ok) {
        os << "no fit: " << f.reason << "\n";
        continue;
      }
      std::snprintf(line, sizeof line, "T = %.4g s + %.4g s/Mparam P", f.coef[0], f.coef[1] * 1e6);
      os << line;
      if (f.coef.size() > 2) {
        std::snprintf(line, sizeof line, " + %.4g s/Mparam^2 P^2", f.coef[2] * 1e12);
        os << line;
      }
      std::snprintf(line, sizeof line, "   R^2 %.4f, max residual %.1f %%, %d points, %d models, P %.3g..%.3g M\n", f.r2,
                    f.max_rel_residual * 100, f.points, f.models, f.params_min / 1e6, f.params_max / 1e6);
      os << line;
      if (!f.note.empty()) os << "      note: " << f.note << "\n";
    }
  }
}

std::string fit_json(const FitResult& r) {
  nlohmann::ordered_json j;
  j["dpx_fit"] = kFormatVersion;
  j["sources"] = r.sources;
  j["skipped_wrong"] = r.skipped_wrong;
  auto& cs = j["collectives"] = nlohmann::ordered_json::array();
  for (const CollectiveFit& f : r.collectives) {
    nlohmann::ordered_json c;
    c["collective"] = f.collective;
    c["algo"] = f.algo;
    c["backend"] = f.backend;
    c["in_place"] = f.in_place;
    c["ranks"] = f.ranks;
    c["ok"] = f.ok;
    if (!f.ok) c["reason"] = f.reason;
    c["alpha_s"] = f.alpha_s;
    c["beta_s_per_byte"] = f.beta_s_per_byte;
    if (f.has_gamma) c["gamma_s_per_byte"] = f.gamma_s_per_byte;
    else c["gamma_s_per_byte"] = nullptr;
    c["beta_from"] = f.beta_from;
    c["note"] = f.note;
    c["r2"] = f.r2;
    c["max_rel_residual"] = f.max_rel_residual;
    c["points"] = f.points;
    c["sizes"] = f.sizes;
    c["bytes_min"] = f.bytes_min;
    c["bytes_max"] = f.bytes_max;
    c["ranks_min"] = f.ranks_min;
    c["ranks_max"] = f.ranks_max;
    c["memory_only"] = f.memory_only;
    c["formula"] = f.formula;
    cs.push_back(c);
  }
  auto& os = j["overheads"] = nlohmann::ordered_json::array();
  for (const OverheadFit& f : r.overheads) {
    nlohmann::ordered_json o;
    o["parallel"] = f.parallel;
    o["algo"] = f.algo;
    o["ranks"] = f.ranks;
    o["bucket_mb"] = f.bucket_mb;
    o["accumulate"] = f.accumulate;
    o["target"] = f.target;
    o["kind"] = f.kind;
    o["ok"] = f.ok;
    if (!f.ok) o["reason"] = f.reason;
    o["coef"] = f.coef;
    o["note"] = f.note;
    o["r2"] = f.r2;
    o["max_rel_residual"] = f.max_rel_residual;
    o["points"] = f.points;
    o["models"] = f.models;
    o["params_min"] = f.params_min;
    o["params_max"] = f.params_max;
    os.push_back(o);
  }
  return j.dump(2) + "\n";
}

bool is_fit_json(const std::string& path) {
  if (!is_readable_input(path, 64 * kMiB)) return false;
  std::ifstream in(path);
  if (!in) return false;
  try {
    const auto j = nlohmann::json::parse(in);
    return j.is_object() && j.contains("dpx_fit");
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

FitResult read_fit_json(const std::string& path, const char* flag) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) usage_fail(flag, ": '", path, "' is a folder, not a dpx fit JSON file");
  check_input_file(path, flag, 64 * kMiB);  // a FIFO would block the parse; a fit file is a few KiB
  std::ifstream in(path);
  if (!in) usage_fail(flag, ": cannot read '", path, "' (make one with dpx fit FILE.csv --out ", path, ")");
  FitResult r;
  try {
    const auto j = nlohmann::json::parse(in);
    if (!j.is_object() || !j.contains("dpx_fit"))
      usage_fail(flag, ": '", path, "' is not a file that dpx fit wrote");
    if (j.at("dpx_fit").get<int>() != kFormatVersion)
      usage_fail(flag, ": '", path, "' is of format ", j.at("dpx_fit").dump(), "; this dpx reads ", kFormatVersion,
                 ": fit again");
    for (const auto& c : j.at("collectives")) {
      CollectiveFit f;
      f.collective = c.at("collective").get<std::string>();
      f.algo = c.at("algo").get<std::string>();
      f.backend = c.at("backend").get<std::string>();
      f.in_place = c.at("in_place").get<bool>();
      f.ranks = c.at("ranks").get<int>();
      f.ok = c.at("ok").get<bool>();
      if (c.contains("reason")) f.reason = c.at("reason").get<std::string>();
      f.alpha_s = c.at("alpha_s").get<double>();
      f.beta_s_per_byte = c.at("beta_s_per_byte").get<double>();
      f.has_gamma = !c.at("gamma_s_per_byte").is_null();
      if (f.has_gamma) f.gamma_s_per_byte = c.at("gamma_s_per_byte").get<double>();
      f.beta_from = c.at("beta_from").get<std::string>();
      f.note = c.at("note").get<std::string>();
      f.r2 = c.at("r2").get<double>();
      f.max_rel_residual = c.at("max_rel_residual").get<double>();
      f.points = c.at("points").get<int>();
      f.sizes = c.at("sizes").get<int>();
      f.bytes_min = c.at("bytes_min").get<double>();
      f.bytes_max = c.at("bytes_max").get<double>();
      f.ranks_min = c.at("ranks_min").get<int>();
      f.ranks_max = c.at("ranks_max").get<int>();
      f.memory_only = c.value("memory_only", false);  // absent in fits of dpx before it
      f.formula = c.at("formula").get<std::string>();
      if (f.ok && (!(f.alpha_s >= 0) || !(f.beta_s_per_byte >= 0) || (f.has_gamma && !(f.gamma_s_per_byte >= 0))))
        usage_fail(flag, ": '", path, "': ", f.name(), " has a negative coefficient: not what dpx fit writes");
      r.collectives.push_back(f);
    }
    r.sources = j.at("sources").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    usage_fail(flag, ": '", path, "' is not a dpx fit file: ", excerpt(e.what(), 200));
  }
  return r;
}

}  // namespace dpx::analysis
