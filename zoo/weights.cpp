// load_state: every tensor is checked (name, shape, dtype) before any is copied, so a file that
// does not fit leaves the model as it was.
#include "zoo/weights.hpp"

#include <set>

#include "core/error.hpp"

namespace dpx::zoo {

namespace {
bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

std::string first_few(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 5) s += detail::concat(" and ", names.size() - 5, " more");
  return s;
}
}  // namespace

LoadReport load_state(nn::Model& model, const SafeTensors& file, bool strict) {
  LoadReport report;
  auto state = model.state_dict();
  std::set<std::string> used;
  // Check everything first, so a bad file leaves the model untouched.
  std::vector<std::pair<Tensor*, Tensor>> copies;
  for (auto& [name, target] : state) {
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
    if (!used.count(name)) report.unexpected.push_back(name);
  if (strict && (!report.missing.empty() || !report.unexpected.empty()))
    fail(file.path, ": the weights do not fit the model: ", report.missing.size(), " missing (",
         first_few(report.missing), "), ", report.unexpected.size(), " unexpected (",
         first_few(report.unexpected), "); build the model that saved them, or load with strict off");
  for (auto& [target, value] : copies) target->copy_from(value);  // views into the model
  report.loaded = static_cast<int64_t>(copies.size());
  return report;
}

}  // namespace dpx::zoo
