// `dpx plot`'s inputs: bench results.csv and collective CSV files read by column name (other
// columns may come and go), a bench folder's steps/*.csv for the loss, and dpx train --trace
// JSON files, recognised by their content.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "analysis/csv_table.hpp"
#include "analysis/plot.hpp"
#include "analysis/plot_data.hpp"
#include "core/error.hpp"
#include "core/input_files.hpp"

namespace dpx::analysis::plot {

namespace fs = std::filesystem;

namespace {

// A field that older files lack or leave empty (the intervals below 3 repeats): NaN.
double optional_number(const CsvTable& t, size_t row, std::string_view name) {
  if (!t.has(name) || t.text(row, t.column(name)).empty()) return kNone;
  return t.number(row, t.column(name));
}

// --loss-threshold X (or =X) of the dpx bench command line in command.txt; 0 when absent.
double loss_threshold_of(const std::string& command) {
  std::istringstream words(command);
  std::string w, previous;
  while (words >> w) {
    if (w.rfind("--loss-threshold=", 0) == 0) return std::atof(w.c_str() + 17);
    if (previous == "--loss-threshold") return std::atof(w.c_str());
    previous = w;
  }
  return 0;
}

// The folder's steps/<tag>.csv files (dpx bench) or its steps.csv (dpx train), one series each:
// rank 0's loss by global step, and by epoch.
void read_losses(const fs::path& folder, const std::string& run, const std::string& command, Inputs& in) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(folder / "steps", ec)) {
    for (const auto& e : fs::directory_iterator(folder / "steps", ec))
      if (e.path().extension() == ".csv") files.push_back(e.path());
  } else if (fs::is_regular_file(folder / "steps.csv", ec)) {
    files.push_back(folder / "steps.csv");
  }
  if (files.empty()) return;
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    return ShortFirst{}(a.filename().string(), b.filename().string());
  });
  LossRun lr{files.size() == 1 && files[0].filename() == "steps.csv" ? files[0].string() : (folder / "steps").string(),
             run, loss_threshold_of(command), {}};
  for (const fs::path& f : files) {
    const CsvTable t = CsvTable::read(f.string(), "dpx plot");
    const size_t c_rank = t.column("rank"), c_global = t.column("global_step"), c_loss = t.column("loss");
    const bool has_epoch = t.has("epoch") && t.has("step");
    LossSeries s;
    // dpx train's steps.csv is named after its folder; dpx bench's steps/<tag>.csv after the tag.
    s.label = f.filename() == "steps.csv" ? folder.filename().string() : f.stem().string();
    std::map<int, double> steps_in_epoch;  // epoch -> its steps (the largest step + 1)
    std::vector<std::tuple<int, double, double>> rows;  // (epoch, step, loss)
    for (size_t r = 0; r < t.rows(); ++r) {
      if (t.number(r, c_rank) != 0) continue;  // dpx bench measures threshold_step on rank 0's loss
      const double step = t.number(r, c_global), loss = t.number(r, c_loss);
      s.points.emplace_back(step, loss);
      if (lr.threshold > 0 && s.threshold_step < 0 && loss < lr.threshold) {
        s.threshold_step = step;
        s.threshold_loss = loss;
      }
      if (has_epoch) {
        const int epoch = static_cast<int>(t.number(r, t.column("epoch")));
        const double in_epoch = t.number(r, t.column("step"));
        steps_in_epoch[epoch] = std::max(steps_in_epoch[epoch], in_epoch + 1);
        rows.emplace_back(epoch, in_epoch, loss);
      }
    }
    for (auto [epoch, step, loss] : rows) s.by_epoch.emplace_back(epoch + step / steps_in_epoch[epoch], loss);
    std::sort(s.by_epoch.begin(), s.by_epoch.end());
    s.epochs = static_cast<int>(steps_in_epoch.size());
    std::sort(s.points.begin(), s.points.end());
    if (!s.points.empty()) lr.series.push_back(std::move(s));
  }
  if (!lr.series.empty()) in.losses.push_back(std::move(lr));
}

// The sweep axes of dpx bench beyond model, batch and devices that results.csv records, each as
// it names a series: (column, words before the value, words after).
struct Axis {
  const char* column;
  const char* before;
  const char* after;
};
constexpr Axis kSeriesAxes[] = {{"algo", "", ""},           {"bucket_mb", "bucket ", " MiB"},
                                {"accumulate", "acc ", ""}, {"optimizer", "", ""},
                                {"grad_dtype", "grad ", ""}};
// Row r's value of `a` as a label says it: "bucket 25 MiB".
std::string axis_text(const CsvTable& t, size_t r, const Axis& a) {
  return std::string(a.before) + t.text(r, t.column(a.column)) + a.after;
}

// Whether two cells say the same value: equal text, or equal numbers ("25" and "25.0").
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char *ea = nullptr, *eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
  return !a.empty() && !b.empty() && *ea == '\0' && *eb == '\0' && x == y;
}

void read_bench(const CsvTable& t, const std::string& source, bool several, const Where& where, Inputs& in) {
  const size_t c_model = t.column("model"), c_ranks = t.column("ranks"), c_ips = t.column("images_per_s");
  const size_t c_batch = t.column("batch_size"), c_rank_batch = t.column("rank_batch");
  const size_t c_par = t.column("parallel"), c_dev = t.column("devices"), c_data = t.column("dataset");
  auto col = [&](std::string_view n) { return t.column(n); };
  const size_t c_load = col("mean_load_s"), c_h2d = col("mean_h2d_s"), c_fwd = col("mean_forward_s"),
               c_bwd = col("mean_backward_s"), c_comm = col("mean_comm_exposed_s"), c_opt = col("mean_optimizer_s"),
               c_wait = col("mean_wait_s"), c_step = col("mean_step_s"), c_se = col("scaling_efficiency"),
               c_lb = col("load_balance"), c_ce = col("comm_efficiency"), c_pe = col("parallel_efficiency");
  const bool has_scaling = t.has("scaling");
  const bool has_workers = t.has("workers");  // dpx bench's loader columns (results.csv only)
  std::set<std::string> parallels, scalings_met, workers_met;
  TextSet models, devices, datasets, batches, scalings;
  // --where: the rows kept.
  for (const auto& [axis, value] : where)
    if (!t.has(axis)) {
      std::string columns;
      for (const char* c : {"model", "dataset", "devices", "ranks", "parallel", "scaling", "batch_size", "rank_batch",
                            "algo", "bucket_mb", "accumulate", "optimizer", "grad_dtype", "workers"})
        if (t.has(c)) columns += (columns.empty() ? "" : ", ") + std::string(c);
      usage_fail("--where ", axis, "=", value, ": '", source, "' has no column ", axis, " (its sweep axes: ", columns,
                 ")");
    }
  std::vector<size_t> kept;
  for (size_t r = 0; r < t.rows(); ++r) {
    bool keep = true;
    for (const auto& [axis, value] : where) keep = keep && same_value(t.text(r, t.column(axis)), value);
    if (keep) kept.push_back(r);
  }
  if (kept.empty()) {
    std::string conditions, held;
    for (const auto& [axis, value] : where) {
      conditions += (conditions.empty() ? "" : " ") + axis + "=" + value;
      TextSet values;
      for (size_t r = 0; r < t.rows(); ++r) values.insert(t.text(r, t.column(axis)));
      held += (held.empty() ? "" : "; ") + axis + " " + join(values, ", ");
    }
    usage_fail("--where ", conditions, ": no row of '", source, "' holds that (its rows hold ", held, ")");
  }
  // The axes that vary among the kept rows: each names the series.
  std::vector<const Axis*> varying;
  for (const Axis& a : kSeriesAxes) {
    if (!t.has(a.column)) continue;
    std::set<std::string> values;
    for (size_t r : kept) values.insert(t.text(r, t.column(a.column)));
    if (values.size() > 1) varying.push_back(&a);
  }
  for (size_t r : kept) {
    parallels.insert(t.text(r, c_par));
    scalings_met.insert(has_scaling ? t.text(r, t.column("scaling")) : "strong");
    if (has_workers) workers_met.insert(t.text(r, t.column("workers")));
  }
  std::map<std::string, size_t> index;
  for (size_t r : kept) {
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
    // Weak and strong rows of one batch size are different series (batch 16 per rank against
    // 16 in all), and different figures.
    if (scalings_met.size() > 1) {
      label.append(" ").append(scaling);
      key.append("-").append(scaling);
    }
    std::string axes_label;  // the varying sweep axes: "tree bucket 1 MiB acc 4"
    for (const Axis* a : varying) {
      axes_label += " " + axis_text(t, r, *a);
      key.append("-").append(a->column).append(t.text(r, t.column(a->column)));
    }
    label += axes_label;
    std::string family_label = label, family_key = key;
    // A sweep of loader workers: a series per number of workers.
    const std::string workers = has_workers ? t.text(r, t.column("workers")) : "";
    if (workers_met.size() > 1) {
      label.append(" ").append(workers).append(" workers");
      key.append("-w").append(workers);
    }
    if (several) {
      const std::string folder = fs::path(source).parent_path().filename().string();
      for (std::string* l : {&label, &family_label}) l->append(" (").append(source).append(")");
      for (std::string* k : {&key, &family_key}) k->append("-").append(folder);
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
    b.comm_total = optional_number(t, r, "mean_comm_total_s");
    b.images_per_s_ci_lo = optional_number(t, r, "images_per_s_ci_lo");
    b.images_per_s_ci_hi = optional_number(t, r, "images_per_s_ci_hi");
    b.ci_coverage = optional_number(t, r, "ci_coverage");
    if (const double n = optional_number(t, r, "repeats"); !std::isnan(n)) b.repeats = n;
    b.bytes_per_epoch_formula = optional_number(t, r, "bytes_per_epoch_formula");
    b.bytes_per_epoch_counted = optional_number(t, r, "bytes_per_epoch_counted");
    b.scaling_efficiency = t.number(r, c_se);
    b.load_balance = t.number(r, c_lb);
    b.comm_efficiency = t.number(r, c_ce);
    b.parallel_efficiency = t.number(r, c_pe);
    b.rank_batch = t.number(r, c_rank_batch);
    b.memory_budget = optional_number(t, r, "memory_budget_bytes");
    b.disturbed = optional_number(t, r, "disturbed") == 1;
    if (has_workers) {
      b.workers = t.number(r, t.column("workers"));
      b.loader_images_per_worker_s = optional_number(t, r, "loader_images_per_worker_s");
    }
    auto it = index.find(key);
    if (it == index.end()) {
      std::map<std::string, std::string> axes = {{"model", t.text(r, c_model)},
                                                 {"batch", "batch " + batch + (weak ? "/rank" : "")},
                                                 {"parallel", t.text(r, c_par)},
                                                 {"scaling", scaling + " scaling"}};
      if (has_workers) axes["workers"] = workers + " workers";
      for (const Axis& a : kSeriesAxes)
        if (t.has(a.column)) axes[a.column] = axis_text(t, r, a);
      it = index.emplace(key, in.bench.size()).first;
      std::string model = t.text(r, c_model);
      if (parallels.size() > 1) model += " " + t.text(r, c_par);
      if (scalings_met.size() > 1) model += " " + scaling + " scaling";
      if (workers_met.size() > 1) model += " " + workers + " workers";
      model += axes_label;
      if (several) model += " (" + source + ")";
      in.bench.push_back({label, slug(key), source, "", model, t.number(r, weak ? c_rank_batch : c_batch), weak, {},
                          t.text(r, c_model) + (parallels.size() > 1 ? " " + t.text(r, c_par) : "") + axes_label +
                              (several ? " (" + source + ")" : ""),
                          family_label, family_key, t.text(r, c_model), axes});
    }
    in.bench[it->second].rows.push_back(b);
  }
  for (auto& g : in.bench)
    std::stable_sort(g.rows.begin(), g.rows.end(), [](const BenchRow& a, const BenchRow& b) { return a.ranks < b.ranks; });
  // The command that made the folder when dpx bench recorded it (command.txt), else the sweep
  // as results.csv describes it.
  std::string command;
  const std::string command_file = (fs::path(source).parent_path() / "command.txt").string();
  if (is_readable_input(command_file, kMiB))
    if (std::ifstream cmd{command_file}; cmd) std::getline(cmd, command);
  const std::string run =
      command.rfind("dpx bench", 0) == 0
          ? "data: " + source + " from " + excerpt(command, 600)
          : "data: " + source + " from " +
                (fs::path(source).filename() == "summary.csv" ? "dpx train (model " : "dpx bench (models ") +
                join(models, ",") + ", batch sizes " + join(batches, ",") + ", devices " + join(devices, " ") +
                ", dataset " + join(datasets, ",") + ", " + join(scalings, "/") + " scaling)";
  for (auto& g : in.bench)
    if (g.source == source) g.run = run;
  in.bench_captions.push_back(run);
  // The steps files name no configuration columns, so --where cannot select among them: with
  // --where the loss figures are left out rather than drawn with rows it excluded.
  if (where.empty()) read_losses(fs::path(source).parent_path(), run, command, in);
}

void read_collective(const CsvTable& t, const std::string& source, bool several, Inputs& in) {
  const size_t c_coll = t.column("collective"), c_algo = t.column("algo"), c_backend = t.column("backend"),
               c_ranks = t.column("ranks"), c_bytes = t.column("bytes"), c_place = t.column("placement"),
               c_busbw = t.column("busbw_gbs");
  const bool has_nodes = t.has("nodes");
  TextSet ranks, nodes, collectives, backends;
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
    std::string fkey = coll;  // appended to, not "-" + s: GCC 12's -Wrestrict misfires on that
    if (several) fkey.append("-").append(fs::path(source).stem().string());
    auto fit = figures.find(fkey);
    if (fit == figures.end()) {
      fit = figures.emplace(fkey, in.collectives.size()).first;
      std::string title = coll;
      if (several) title.append(" (").append(source).append(")");
      in.collectives.push_back({title, source, fkey, {}, {}, {}});
    }
    CollectiveFigure& fig = in.collectives[fit->second];
    auto& sidx = series[fkey];
    auto sit = sidx.find(label);
    if (sit == sidx.end()) {
      sit = sidx.emplace(label, fig.series.size()).first;
      fig.series.push_back({label, {}});
    }
    fig.series[sit->second].points.emplace_back(t.number(r, c_bytes), t.number(r, c_busbw));
    if (t.has("limit_gbs") && t.has("limit_source") && !t.text(r, t.column("limit_gbs")).empty()) {
      const double limit = t.number(r, t.column("limit_gbs"));
      if (limit > 0) {
        double& kept = fig.limits[t.text(r, t.column("limit_source"))][t.number(r, c_bytes)];
        kept = kept > 0 ? std::min(kept, limit) : limit;  // several runs: the tightest
      }
    }
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

// A file whose first character other than white space is '{': a JSON trace, not a CSV. Only a
// regular file of a readable size is opened (a FIFO would block here).
bool looks_like_json(const std::string& path) {
  check_input_file(path, "dpx plot", 256 * kMiB);
  std::ifstream f(path);
  char c = 0;
  while (f.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  return c == '{';
}

// The phases of a dpx train --trace file, each tied to the step whose "step N" event holds it.
void read_trace(const std::string& path, Inputs& in) {
  nlohmann::json j;
  try {
    std::ifstream f(path);
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    usage_fail("'", path, "' is not valid JSON (", e.what(), "): name a dpx train --trace file");
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    usage_fail("'", path, "' is JSON without traceEvents: name a dpx train --trace file, e.g. ", kTraceRun);
  static const std::set<std::string> phases = {"load", "h2d", "forward", "backward", "comm_exposed", "optimizer",
                                               "wait"};
  struct Step {
    double start, end;
    long step;
  };
  std::map<int, std::vector<Step>> steps;  // by rank
  Trace tr{path, "data: " + path + " from dpx train --trace", 0, {}};
  // A trace's fields as dpx train writes them: each checked, so that an edited file is refused with
  // its name and the event, never a JSON library's message or a figure of 10^8 rows (pid 100000000
  // once made a 2.6 GB gnuplot script).
  constexpr int kMaxRanks = 4096;
  constexpr size_t kMaxBoxes = 1000000;
  int64_t index = -1;
  auto field = [&](const nlohmann::json& e, const char* key) -> double {
    const auto it = e.find(key);
    if (it == e.end() || !it->is_number() || !std::isfinite(it->get<double>()))
      usage_fail("'", path, "' event ", index, ": '", key, "' is not a finite number: not a trace dpx train wrote "
                 "(or an edited one)");
    return it->get<double>();
  };
  for (const auto& e : j["traceEvents"]) {
    ++index;
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string() || e["ph"].get<std::string>() != "X" ||
        !e.contains("pid") || !e.contains("ts"))
      continue;
    const std::string name = e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
    const double pid = field(e, "pid");
    if (pid != std::floor(pid) || pid < 0 || pid >= kMaxRanks)
      usage_fail("'", path, "' event ", index, ": pid ", pid, " is not a rank in [0, ", kMaxRanks,
                 "): not a trace dpx train wrote (or an edited one)");
    const int rank = static_cast<int>(pid);
    const double ts = field(e, "ts"), dur = e.contains("dur") ? field(e, "dur") : 0.0;
    if (dur < 0) usage_fail("'", path, "' event ", index, ": a negative duration ", dur);
    if (tr.boxes.size() >= kMaxBoxes)
      usage_fail("'", path, "' holds more than ", kMaxBoxes, " phase events: more than a figure can show; trace "
                 "fewer steps (dpx train --trace-steps a:b)");
    if (name.rfind("step ", 0) == 0 && e.contains("args") && e["args"].is_object()) {
      const auto& args = e["args"];
      const long step = args.contains("step") && args["step"].is_number_integer() ? args["step"].get<long>() : -1L;
      steps[rank].push_back({ts, ts + dur, step});
    }
    else if (phases.count(name))
      tr.boxes.push_back({rank, name, ts / 1e3, (ts + dur) / 1e3, -1});
    else if (name.rfind("bucket ", 0) == 0)  // a DDP bucket's all-reduce, on the communication thread
      tr.boxes.push_back({rank, "all_reduce", ts / 1e3, (ts + dur) / 1e3, -1});
    tr.ranks = std::max(tr.ranks, rank + 1);
  }
  for (TraceBox& box : tr.boxes)
    for (const Step& s : steps[box.rank])
      if (box.start_ms * 1e3 >= s.start && box.start_ms * 1e3 <= s.end) box.step = s.step;
  if (tr.boxes.empty())
    usage_fail("'", path, "' holds no phase events (load, forward, backward, ...): nothing to plot; make one with ",
               kTraceRun);
  in.traces.push_back(std::move(tr));
}

// A dpx predict --csv file: one run per file (one model, algorithm and scaling).
void read_prediction(const CsvTable& t, const std::string& source, std::vector<PredictionRun>& out) {
  PredictionRun run;
  run.source = source;
  run.model = t.text(0, t.column("model"));
  run.algo = t.text(0, t.column("algo"));
  run.scaling = t.text(0, t.column("scaling"));
  for (size_t r = 0; r < t.rows(); ++r) {
    PredictionRow p;
    p.batch = t.number(r, t.column("batch"));
    p.ranks = t.number(r, t.column("ranks"));
    p.rank_batch = t.number(r, t.column("rank_batch"));
    p.images_per_s = t.number(r, t.column("images_per_s"));
    p.efficiency = t.number(r, t.column("efficiency"));
    p.step_s = t.number(r, t.column("step_s"));
    if (!(p.ranks >= 1) || !(p.rank_batch > 0) || !(p.step_s > 0))
      usage_fail("'", source, "' line ", t.line_of(r), ": ranks, rank_batch and step_s must be positive: not what "
                 "dpx predict wrote");
    p.measured_step_s = optional_number(t, r, "measured_step_s");
    run.rows.push_back(p);
  }
  run.run = "data: " + source + " from dpx predict (" + run.model + ", DDP " + run.algo + ", " + run.scaling +
            " scaling)";
  out.push_back(std::move(run));
}

}  // namespace

Where parse_where(const std::vector<std::string>& conditions) {
  Where out;
  for (const std::string& c : conditions) {
    const size_t eq = c.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == c.size())
      usage_fail("--where '", c, "': give AXIS=VALUE, a results.csv column and a value it holds (e.g. algo=ring, "
                 "bucket_mb=25, accumulate=4)");
    out.emplace_back(c.substr(0, eq), c.substr(eq + 1));
  }
  return out;
}

Inputs read_inputs(const std::vector<std::string>& paths, const Where& where) {
  if (paths.empty())
    usage_fail("dpx plot: name at least one dpx bench folder, dpx collective --csv file or dpx train --trace file");
  std::vector<std::pair<CsvTable, std::string>> bench, coll;
  std::vector<std::string> traces;
  Inputs in;
  for (const auto& [file, named] : input_files(paths)) {
    if (looks_like_json(file)) {
      traces.push_back(file);
      continue;
    }
    CsvTable t = CsvTable::read(file, "dpx plot");
    if (t.has("efficiency") && t.has("step_s") && t.has("rank_batch") && t.has("measured_step_s")) {
      if (t.rows() == 0) usage_fail("'", file, "' has a header but no rows: dpx predict predicted nothing");
      read_prediction(t, file, in.predictions);
      continue;
    }
    const bool is_coll = t.has("busbw_gbs") && t.has("collective");
    const bool is_bench = t.has("images_per_s") && t.has("ranks") && t.has("model");
    if (!is_coll && !is_bench)
      usage_fail("'", file,
                 "' is neither a dpx bench results.csv, a dpx collective --csv file nor a dpx train --trace file (its "
                 "header: ",
                 t.header().empty() ? std::string() : t.header().front(), ",...)");
    if (t.rows() == 0) usage_fail("'", file, "' has a header but no rows: the run that wrote it measured nothing");
    (is_coll ? coll : bench).emplace_back(std::move(t), file);
  }
  if (!where.empty() && bench.empty())
    usage_fail("--where selects rows of dpx bench results; none of the inputs is one");
  for (auto& [t, f] : bench) read_bench(t, f, bench.size() > 1, where, in);
  for (auto& [t, f] : coll) read_collective(t, f, coll.size() > 1, in);
  for (const std::string& f : traces) read_trace(f, in);
  return in;
}

}  // namespace dpx::analysis::plot
