// load_state: every tensor is checked (name, shape, dtype) before any is copied, so a file that
// does not fit leaves the model as it was. save_state: the model's state_dict, atomically.
#include "zoo/weights.hpp"

#include <set>

#include "core/error.hpp"
#include "kernels/ops.hpp"
#include "core/output_files.hpp"

namespace dpx::zoo {

namespace {
bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

std::string first_few(const std::vector<std::string>& names, size_t limit = 5) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > limit) s += detail::concat(" and ", names.size() - limit, " more");
  return s;
}
}  // namespace

LoadReport load_state(nn::Model& model, const SafeTensors& file, bool strict) {
  return load_state(model, file, strict, "");
}

LoadReport load_state(nn::Model& model, const SafeTensors& file, bool strict, const std::string& skip_prefix) {
  LoadReport report;
  auto state = model.state_dict();
  auto skipped = [&](const std::string& name) { return !skip_prefix.empty() && name.rfind(skip_prefix, 0) == 0; };
  std::set<std::string> used;
  // Check everything first, so a bad file leaves the model untouched.
  std::vector<std::pair<Tensor*, Tensor>> copies;
  for (auto& [name, target] : state) {
    if (skipped(name)) continue;
    const Tensor* src = file.find(name);
    if (!src) {
      report.missing.push_back(name);
      continue;
    }
    used.insert(name);
    Tensor value = *src;
    if (value.dtype() != target.dtype() && is_float(value.dtype()) && target.dtype() == DType::f32)
      value = value.cast(DType::f32);
    try {
      check_tensor_matches(name, value, target.shape(), target.dtype());
    } catch (const Error& e) {
      fail(file.path, ": ", e.what());
    }
    copies.emplace_back(&target, value);
  }
  for (const auto& [name, t] : file.tensors)
    if (!used.count(name) && !skipped(name)) report.unexpected.push_back(name);
  if (strict && (!report.missing.empty() || !report.unexpected.empty()))
    fail(file.path, ": the weights do not fit the model: ", report.missing.size(), " missing (",
         first_few(report.missing), "), ", report.unexpected.size(), " unexpected (",
         first_few(report.unexpected), "); build the model that saved them, or load with strict off");
  for (auto& [target, value] : copies) target->copy_from(value);  // views into the model
  report.loaded = static_cast<int64_t>(copies.size());
  return report;
}

std::string describe_load(const LoadReport& report, size_t limit) {
  return detail::concat(report.loaded, " tensors loaded, ", report.missing.size(), " missing",
                        report.missing.empty() ? "" : " (" + first_few(report.missing, limit) + ")", ", ",
                        report.unexpected.size(), " unexpected",
                        report.unexpected.empty() ? "" : " (" + first_few(report.unexpected, limit) + ")");
}

void save_state(const std::string& path, nn::Model& model, std::map<std::string, std::string> metadata) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : model.state_dict()) tensors.emplace_back(name, t);
  sort_like_reference(tensors);
  metadata.emplace("format", "pt");  // what safetensors.torch.save_file writes
  metadata.emplace(std::string(kGeneratorKey), std::string(kGeneratorValue));  // dpx may replace it
  write_safetensors(path, tensors, metadata, "--save");
}

void check_finite(nn::Model& model, const std::string& file, const char* flag, const std::string& escape) {
  Context ctx = Context::cpu(1);
  for (auto& [name, t] : model.state_dict()) {
    if (t.dtype() != DType::f32) continue;
    const int64_t bad = ops::count_nonfinite(ctx, t);
    if (bad > 0)
      fail(flag, " ", file, ": '", name, "' holds ", bad, " NaN or infinite value", bad > 1 ? "s" : "",
           ": the file is damaged, or the run that wrote it diverged", escape.empty() ? "" : " (" + escape + ")");
  }
}

}  // namespace dpx::zoo
