// Comparing the weight files two runs wrote (a single replica's and a parallel job's).
#pragma once
#include <limits>
#include <string>

#include "core/safetensors.hpp"
#include "tests/common/compare.hpp"

namespace dpx::testing {

// The largest rel_diff (with `floor`) between two weight files, tensor by tensor; +infinity when
// a tensor of one is missing from the other or the files hold different numbers of tensors.
inline double weights_rel_diff(const std::string& a, const std::string& b, double floor = 1e-3) {
  const SafeTensors x = read_safetensors(a), y = read_safetensors(b);
  if (x.tensors.size() != y.tensors.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (const auto& [name, t] : x.tensors) {
    const Tensor* u = y.find(name);
    if (u == nullptr) return std::numeric_limits<double>::infinity();
    const double d = max_rel_diff(t, *u, floor);
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

}  // namespace dpx::testing
