// The shared permute and broadcast plans (kernels/layout_plan.hpp).
#include "kernels/layout_plan.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace dpx::ops::plan {

namespace {

std::string perm_str(const std::vector<int>& perm) {
  std::string s = "(";
  for (size_t i = 0; i < perm.size(); ++i) s += (i ? ", " : "") + std::to_string(perm[i]);
  return s + ")";
}

}  // namespace

PermutePlan permute_plan(const char* op, const char* in_name, const Shape& in_shape, const char* out_name,
                         const Shape& out_shape, const std::vector<int>& perm) {
  const int d = static_cast<int>(in_shape.size());
  std::vector<bool> seen(static_cast<size_t>(std::max(d, 0)), false);
  bool ok = static_cast<int>(perm.size()) == d && d <= kMaxPermuteDims;
  for (int k = 0; ok && k < d; ++k) {
    ok = perm[k] >= 0 && perm[k] < d && !seen[perm[k]];
    if (ok) seen[perm[k]] = true;
  }
  if (!ok)
    fail(op, ": ", perm_str(perm), " is not a permutation of the ", d, " dimensions of ", in_name, " ",
         shape_str(in_shape), " (at most ", kMaxPermuteDims, " dimensions)");
  Shape want(static_cast<size_t>(d));
  for (int k = 0; k < d; ++k) want[k] = in_shape[perm[k]];
  if (out_shape != want)
    fail(op, ": ", out_name, " has shape ", shape_str(out_shape), ", but ", in_name, " ", shape_str(in_shape),
         " permuted by ", perm_str(perm), " is ", shape_str(want));
  std::vector<int64_t> stride(static_cast<size_t>(d), 1);
  for (int k = d - 2; k >= 0; --k) stride[k] = stride[k + 1] * in_shape[k + 1];
  PermutePlan p;
  for (int k = 0; k < d; ++k) {
    const int64_t n = want[k], s = stride[perm[k]];
    p.numel *= n;
    if (n == 1) continue;
    if (p.dims > 0 && p.in_stride[p.dims - 1] == s * n) {
      p.size[p.dims - 1] *= n;
      p.in_stride[p.dims - 1] = s;
    } else {
      p.size[p.dims] = n;
      p.in_stride[p.dims] = s;
      ++p.dims;
    }
  }
  if (p.dims == 0) {
    p.dims = 1;
    p.size[0] = 1;
    p.in_stride[0] = 1;
  }
  return p;
}

void check_broadcasts(const char* op, const char* name, const Shape& shape, const char* out_name, const Shape& out) {
  bool ok = shape.size() == out.size() && static_cast<int>(shape.size()) <= kMaxBroadcastDims;
  for (size_t d = 0; ok && d < shape.size(); ++d) ok = shape[d] == out[d] || shape[d] == 1;
  if (!ok)
    fail(op, ": ", name, " ", shape_str(shape), " does not broadcast to ", out_name, " ", shape_str(out),
         ": it needs the same number of dimensions (at most ", kMaxBroadcastDims, "), each equal to ", out_name,
         "'s or 1");
}

BroadcastLayout broadcast_layout(const Shape& out, std::initializer_list<const Shape*> operands) {
  if (operands.size() > static_cast<size_t>(kMaxOperands) || out.size() > static_cast<size_t>(kMaxBroadcastDims))
    fail("broadcast_layout: ", operands.size(), " operands over ", shape_str(out), " (at most ", kMaxOperands,
         " operands and ", kMaxBroadcastDims, " dimensions)");
  BroadcastLayout L;
  L.operands = static_cast<int>(operands.size());
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    bool full[kMaxOperands] = {};
    int k = 0;
    for (const Shape* s : operands) full[k++] = (*s)[d] == out[d];
    bool merge = L.dims > 0;
    for (k = 0; merge && k < L.operands; ++k) merge = full[k] == L.full[k][L.dims - 1];
    if (merge) {
      L.size[L.dims - 1] *= out[d];
    } else {
      L.size[L.dims] = out[d];
      for (k = 0; k < L.operands; ++k) L.full[k][L.dims] = full[k];
      ++L.dims;
    }
    L.numel *= out[d];
  }
  if (L.dims == 0) {  // a single element: one dimension of size 1, full for everyone
    L.dims = 1;
    L.size[0] = 1;
    for (int k = 0; k < L.operands; ++k) L.full[k][0] = true;
  }
  for (int k = 0; k < L.operands; ++k) {
    int64_t s = 1;
    for (int d = L.dims - 1; d >= 0; --d) {
      L.stride[k][d] = L.full[k][d] ? s : 0;
      if (L.full[k][d]) s *= L.size[d];
    }
  }
  return L;
}

}  // namespace dpx::ops::plan
