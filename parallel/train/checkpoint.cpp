// Checkpoint files (see checkpoint.hpp). Tensors: "model/<state_dict name>", "optimizer/<name>",
// "random/rank<r>" (i64, one row of seed, stream, draws per layer), "loader/order" (i64) and
// "records" (f64, one row per step record). The metadata holds the rest as JSON: "options",
// "ranks", "progress", "epochs", "random_layers", "record_columns", and "dpx_checkpoint": "1".
#include "parallel/train/checkpoint.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <nlohmann/json.hpp>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"
#include "core/safetensors.hpp"
#include "core/version_config.hpp"

namespace dpx::parallel {

namespace fs = std::filesystem;

// An epoch's record in the metadata ("epochs"): every field required.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(EpochRecord, epoch, train_loss, test_accuracy, test_loss, time_s, eval_s)

namespace {

constexpr const char* kFormat = "1";

// The options whose change would make a resumed run another run: the model and its data, the
// optimisation, the schedule and the ranks. Threads, workers, outputs, timeouts and the
// all-reduce algorithm may differ (the last changes the order of summation: no longer bit for
// bit, still the same run).
constexpr const char* kMustMatch[] = {
    "--model",          "--dataset",      "--image-size", "--channels",   "--synthetic-size", "--classes",
    "--head",           "--freeze-backbone", "--epochs",  "--batch-size", "--optimizer",      "--lr",
    "--weight-decay",   "--momentum",     "--nesterov",   "--betas",      "--eps",            "--lr-schedule",
    "--label-smoothing", "--seed",        "--steps",      "--accumulate", "--parallel",
    "--grad-dtype",     "--loss-scale",   "--initial-loss-scale", "--loss-scale-window",
    // image folders: the augmentation a resumed run must draw again
    "--resize-size",    "--crop-scale",   "--crop-ratio", "--flip",       "--mean",           "--std",
    "--no-dct-scaling",
};

// Step records as rows of doubles (exact for every field: counts stay far below 2^53).
const std::vector<std::string> kRecordColumns = {
    "rank", "epoch", "step", "global_step", "loss", "load_s", "h2d_s", "forward_s", "backward_s", "comm_total_s",
    "comm_exposed_s", "optimizer_s", "wait_s", "step_s", "images", "comm_bytes", "start_s", "backward_end_s",
    "optimizer_step", "loss_scale", "update_skipped"};
// Checkpoints of older dpx versions end their rows at optimizer_step.
constexpr size_t kOlderRecordColumns = 19;

std::vector<double> record_row(const StepRecord& r) {
  std::vector<double> row = {double(r.rank), double(r.epoch), double(r.step), double(r.global_step), r.loss};
  for (double t : r.times.s) row.push_back(t);
  row.insert(row.end(), {double(r.images), double(r.comm_bytes), r.start_s, r.backward_end_s,
                         r.optimizer_step ? 1.0 : 0.0, double(r.loss_scale), r.update_skipped ? 1.0 : 0.0});
  return row;
}

StepRecord record_of(const double* row, size_t columns) {
  StepRecord r;
  r.rank = static_cast<int>(row[0]);
  r.epoch = static_cast<int64_t>(row[1]);
  r.step = static_cast<int64_t>(row[2]);
  r.global_step = static_cast<int64_t>(row[3]);
  r.loss = row[4];
  for (int p = 0; p < kPhaseCount; ++p) r.times.s[static_cast<size_t>(p)] = row[5 + p];
  r.images = static_cast<int64_t>(row[5 + kPhaseCount]);
  r.comm_bytes = static_cast<uint64_t>(row[6 + kPhaseCount]);
  r.start_s = row[7 + kPhaseCount];
  r.backward_end_s = row[8 + kPhaseCount];
  r.optimizer_step = row[9 + kPhaseCount] != 0;
  if (columns > kOlderRecordColumns) {
    r.loss_scale = static_cast<float>(row[10 + kPhaseCount]);
    r.update_skipped = row[11 + kPhaseCount] != 0;
  }
  return r;
}

Tensor i64_tensor(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

// The checkpoint files of `dir` by step: named checkpoint-<step>.safetensors with a step that fits
// in 64 bits, and dpx checkpoints by their metadata (a stray checkpoint-<huge>.safetensors, or a
// file of someone else's under such a name, is none: never rotated away, never resumed from).
std::vector<std::pair<int64_t, fs::path>> checkpoints_in(const fs::path& dir) {
  constexpr std::string_view prefix = "checkpoint-", suffix = ".safetensors";
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file.size() <= prefix.size() + suffix.size() || !file.starts_with(prefix) || !file.ends_with(suffix)) continue;
    const char* first = file.data() + prefix.size();
    const char* last = file.data() + file.size() - suffix.size();
    int64_t step = 0;
    const auto [end_ptr, err] = std::from_chars(first, last, step);  // takes a '-', never a '+' or a space
    if (err == std::errc() && end_ptr == last && *first != '-' &&
        written_by_dpx(it->path().string(), FileKind::checkpoint))
      found.emplace_back(step, it->path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  fail("checkpoint ", path, " (--resume): ", what, "; it is not a checkpoint this dpx can resume from");
}

// Every number a checkpoint gives is checked before it is used: a count or index a whole number in
// its range (a step record naming a rank outside the run once wrote past a vector's end), a time or
// a sum finite. `what` names the field in the error.
constexpr double kMaxCount = 9007199254740992.0;  // 2^53: doubles hold whole numbers exactly below it
void check_count(const std::string& path, const std::string& what, double v, double lo, double hi) {
  if (!std::isfinite(v) || v != std::floor(v) || v < lo || v > hi)
    bad(path, detail::concat(what, " is ", v, ", not a whole number in [", lo, ", ", hi, "]"));
}
void check_finite_field(const std::string& path, const std::string& what, double v, double lo = -HUGE_VAL) {
  if (!std::isfinite(v) || v < lo) bad(path, detail::concat(what, " is ", v, ", not a finite number", lo == 0 ? " >= 0" : ""));
}

// A step record's row before it becomes a StepRecord: the rank within the run, counts whole, times
// finite and not negative (the loss may be NaN or infinite: --on-nonfinite ignore records them).
void check_record_row(const std::string& path, const double* row, size_t columns, int64_t i, int ranks,
                      int64_t global_step) {
  const std::string at = detail::concat("step record ", i, "'s ");
  check_count(path, at + "rank", row[0], 0, ranks - 1);
  check_count(path, at + "epoch", row[1], 0, kMaxCount);
  check_count(path, at + "step", row[2], 0, kMaxCount);
  check_count(path, at + "global step", row[3], 0, static_cast<double>(std::max<int64_t>(global_step - 1, 0)));
  for (int p = 0; p < kPhaseCount; ++p)
    check_finite_field(path, at + std::string(kPhaseNames[static_cast<size_t>(p)]) + " time", row[5 + p], 0);
  check_count(path, at + "images", row[5 + kPhaseCount], 0, kMaxCount);
  check_count(path, at + "bytes", row[6 + kPhaseCount], 0, kMaxCount);
  check_finite_field(path, at + "start time", row[7 + kPhaseCount]);
  check_finite_field(path, at + "end of backward", row[8 + kPhaseCount]);
  if (columns > kOlderRecordColumns) check_finite_field(path, at + "loss scale", row[10 + kPhaseCount], 0);
}

}  // namespace

RandomStreams random_streams(nn::Model& model) {
  RandomStreams out;
  for (const auto& [name, module] : model.root().named_modules())
    if (auto state = module->random_state()) out.emplace_back(name, *state);
  return out;
}

void set_random_streams(nn::Model& model, const RandomStreams& streams) {
  std::map<std::string, nn::Module*> layers;
  for (const auto& [name, module] : model.root().named_modules())
    if (module->random_state()) layers[name] = module;
  if (layers.size() != streams.size())
    fail("the checkpoint has random streams for ", streams.size(), " layers, this model draws in ", layers.size());
  for (const auto& [name, state] : streams) {
    auto it = layers.find(name);
    if (it == layers.end()) fail("the checkpoint has a random stream for layer '", name, "', which this model lacks");
    it->second->set_random_state(state);
  }
}

std::string write_checkpoint(const std::string& dir, const Checkpoint& c, int keep) {
  ensure_writable_dir(dir, "--checkpoint-dir");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : c.model) tensors.emplace_back("model/" + name, t);
  for (const auto& [name, t] : c.optimizer) tensors.emplace_back("optimizer/" + name, t);
  nlohmann::json layers = nlohmann::json::array();
  for (size_t r = 0; r < c.random.size(); ++r) {
    std::vector<int64_t> rows;
    for (const auto& [name, s] : c.random[r]) {
      if (r == 0) layers.push_back(name);
      for (uint64_t v : {s.seed, s.stream, s.draws}) rows.push_back(static_cast<int64_t>(v));  // bits kept
    }
    Tensor t = i64_tensor(rows);
    tensors.emplace_back("random/rank" + std::to_string(r), t.view({static_cast<int64_t>(c.random[r].size()), 3}));
  }
  tensors.emplace_back("loader/order", i64_tensor(c.order));
  const int64_t columns = static_cast<int64_t>(kRecordColumns.size());
  Tensor records = Tensor::empty({static_cast<int64_t>(c.steps.size()), columns}, DType::f64);
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const std::vector<double> row = record_row(c.steps[i]);
    std::copy(row.begin(), row.end(), records.data<double>() + static_cast<int64_t>(i) * columns);
  }
  tensors.emplace_back("records", records);

  nlohmann::json options = nlohmann::json::object(), epochs = nlohmann::json::array();
  for (const auto& [flag, value] : c.options) options[flag] = value;
  for (const EpochRecord& e : c.epochs) epochs.push_back(e);
  const RunProgress& p = c.progress;
  const nlohmann::json progress = {{"epoch", p.epoch}, {"step", p.step}, {"global_step", p.global_step},
                                   {"epoch_loss_sum", p.epoch_loss_sum}, {"elapsed_s", p.elapsed_s},
                                   {"loss_scale", p.loss_scale},
                                   {"loss_scale_good_updates", p.loss_scale_good_updates}};
  const std::map<std::string, std::string> metadata = {
      {"dpx_checkpoint", kFormat},         {"dpx_version", DPX_VERSION_STRING},
      {std::string(kGeneratorKey), std::string(kGeneratorValue)},
      {"options", options.dump()},        {"ranks", std::to_string(c.ranks)},
      {"progress", progress.dump()},      {"epochs", epochs.dump()},
      {"random_layers", layers.dump()},   {"record_columns", nlohmann::json(kRecordColumns).dump()}};
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%09lld.safetensors", static_cast<long long>(p.global_step));
  const std::string path = (fs::path(dir) / name).string();
  // A file of that name that is not a dpx checkpoint is someone else's: never replaced.
  if (fs::exists(fs::symlink_status(path)) && !written_by_dpx(path, FileKind::checkpoint))
    usage_fail("--checkpoint-dir: '", path, "' exists and is not a dpx checkpoint: not replacing it; move it, or "
               "pass another --checkpoint-dir");
  write_safetensors(path, tensors, metadata, "--checkpoint-dir");
  // Only the older checkpoints dpx can prove it wrote (their metadata says so) are removed.
  const auto all = checkpoints_in(dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < all.size(); ++i) {
    std::error_code ec;
    fs::remove(all[i].second, ec);
  }
  return path;
}

bool has_checkpoint(const std::string& dir) { return !checkpoints_in(dir).empty(); }

Checkpoint read_checkpoint(const std::string& file_or_dir) {
  std::string path = file_or_dir;
  std::error_code ec;
  if (fs::is_directory(file_or_dir, ec)) {
    const auto all = checkpoints_in(file_or_dir);
    if (all.empty())
      usage_fail("--resume ", file_or_dir, ": the folder holds no dpx checkpoint (checkpoint-<step>.safetensors); pass the "
                 "--checkpoint-dir of an earlier run, or one of its files");
    path = all.back().second.string();
  } else if (!fs::exists(file_or_dir, ec)) {
    usage_fail("--resume ", file_or_dir, ": no such file or folder");
  }
  SafeTensors st;
  try {
    st = read_safetensors(path);
  } catch (const Error& e) {
    fail("--resume: ", e.what(), "; pass another checkpoint file (an older one of its folder)");
  }
  return checkpoint_from(st, path);
}

Checkpoint checkpoint_from(const SafeTensors& st, const std::string& path) {
  auto meta = [&](const char* key) -> const std::string& {
    auto it = st.metadata.find(key);
    if (it == st.metadata.end()) bad(path, detail::concat("its metadata has no '", key, "'"));
    return it->second;
  };
  if (meta("dpx_checkpoint") != kFormat) bad(path, "its format is '" + meta("dpx_checkpoint") + "'");
  Checkpoint c;
  c.path = path;
  size_t record_columns = kRecordColumns.size();
  try {
    const nlohmann::json options = nlohmann::json::parse(meta("options"));
    for (auto it = options.begin(); it != options.end(); ++it) c.options.emplace_back(it.key(), it->get<std::string>());
    c.ranks = std::stoi(meta("ranks"));
    const auto p = nlohmann::json::parse(meta("progress"));
    c.progress = {p.at("epoch").get<int64_t>(), p.at("step").get<int64_t>(), p.at("global_step").get<int64_t>(),
                  p.at("epoch_loss_sum").get<double>(), p.at("elapsed_s").get<double>(),
                  p.value("loss_scale", 0.f), p.value("loss_scale_good_updates", int64_t{0})};
    c.epochs = nlohmann::json::parse(meta("epochs")).get<std::vector<EpochRecord>>();
    const auto layers = nlohmann::json::parse(meta("random_layers")).get<std::vector<std::string>>();
    const auto columns = nlohmann::json::parse(meta("record_columns")).get<std::vector<std::string>>();
    const std::vector<std::string> older(kRecordColumns.begin(), kRecordColumns.begin() + kOlderRecordColumns);
    if (columns != kRecordColumns && columns != older)
      bad(path, "its step records have other columns than this dpx writes");
    record_columns = columns.size();
    if (c.ranks < 1 || c.ranks > 65536) bad(path, "it says it was made by " + std::to_string(c.ranks) + " ranks");
    const RunProgress& pr = c.progress;
    check_count(path, "progress's epoch", static_cast<double>(pr.epoch), 0, kMaxCount);
    check_count(path, "progress's step", static_cast<double>(pr.step), 0, kMaxCount);
    check_count(path, "progress's global step", static_cast<double>(pr.global_step), 0, kMaxCount);
    check_finite_field(path, "progress's loss sum", pr.epoch_loss_sum);
    check_finite_field(path, "progress's elapsed time", pr.elapsed_s, 0);
    check_finite_field(path, "progress's loss scale", pr.loss_scale, 0);
    check_count(path, "progress's good updates", static_cast<double>(pr.loss_scale_good_updates), 0, kMaxCount);
    for (const EpochRecord& e : c.epochs) {
      check_count(path, "an epoch record's epoch", static_cast<double>(e.epoch), 0, static_cast<double>(pr.epoch));
      check_finite_field(path, "an epoch record's time", e.time_s, 0);
      check_finite_field(path, "an epoch record's evaluation time", e.eval_s, 0);
    }
    for (int r = 0; r < c.ranks; ++r) {
      const Tensor* t = st.find("random/rank" + std::to_string(r));
      if (!t || t->dtype() != DType::i64 || t->numel() != static_cast<int64_t>(layers.size()) * 3)
        bad(path, "rank " + std::to_string(r) + "'s random streams are missing or malformed");
      RandomStreams streams;
      for (size_t i = 0; i < layers.size(); ++i) {
        const int64_t* v = t->data<int64_t>() + 3 * i;
        streams.emplace_back(layers[i], nn::RandomState{static_cast<uint64_t>(v[0]), static_cast<uint64_t>(v[1]),
                                                        static_cast<uint64_t>(v[2])});
      }
      c.random.push_back(std::move(streams));
    }
  } catch (const nlohmann::json::exception& e) {
    bad(path, std::string("its metadata is malformed (") + e.what() + ")");
  } catch (const std::logic_error& e) {  // std::stoi
    bad(path, std::string("its metadata is malformed (") + e.what() + ")");
  }
  for (const auto& [name, t] : st.tensors) {
    if (name.rfind("model/", 0) == 0) c.model[name.substr(6)] = t;
    else if (name.rfind("optimizer/", 0) == 0) c.optimizer[name.substr(10)] = t;
  }
  const Tensor* order = st.find("loader/order");
  if (!order || order->dtype() != DType::i64 || order->shape().size() != 1) bad(path, "'loader/order' is missing");
  c.order.assign(order->data<int64_t>(), order->data<int64_t>() + order->numel());
  const Tensor* records = st.find("records");
  const int64_t columns = static_cast<int64_t>(record_columns);
  if (!records || records->dtype() != DType::f64 || records->shape().size() != 2 || records->shape()[1] != columns)
    bad(path, "'records' is missing or malformed");
  for (int64_t i = 0; i < records->shape()[0]; ++i) {
    check_record_row(path, records->data<double>() + i * columns, record_columns, i, c.ranks, c.progress.global_step);
    c.steps.push_back(record_of(records->data<double>() + i * columns, record_columns));
  }
  if (c.model.empty()) bad(path, "it holds no model tensors");
  return c;
}

std::string resume_mismatch(const Checkpoint& c, const TrainOptions& options, int ranks) {
  std::map<std::string, std::string> theirs(c.options.begin(), c.options.end()), mine;
  for (const auto& [flag, value] : options.flag_values()) mine[flag] = value;
  std::string out;
  auto differ = [&](const std::string& what, const std::string& a, const std::string& b) {
    out += (out.empty() ? "" : "; ") + what + " is " + (a.empty() ? "(not set)" : a) + " in the checkpoint and " +
           (b.empty() ? "(not set)" : b) + " here";
  };
  if (c.ranks != ranks) differ("the number of ranks", std::to_string(c.ranks), std::to_string(ranks));
  // A flag an older dpx did not record (the mixed-precision and image-folder ones) ran with its
  // default.
  for (const auto& [flag, value] : TrainOptions{}.flag_values()) theirs.emplace(flag, value);
  for (const char* flag : kMustMatch)
    if (theirs[flag] != mine[flag]) differ(flag, theirs[flag], mine[flag]);
  return out;
}

}  // namespace dpx::parallel
