// Host-side plans that the CPU and the CUDA kernels share: a permutation or a broadcast is
// checked once, and its shape is reduced to the fewest dimensions that walk the same memory
// (adjacent dimensions merged where they stay adjacent in every operand). The plans are plain
// structs, passed by value to CUDA kernels.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/tensor.hpp"

namespace dpx::ops::plan {

// ---- permute ----------------------------------------------------------------------------------
constexpr int kMaxPermuteDims = 6;

// out's dimensions (size > 1) with the input stride each one walks, merged where consecutive out
// dimensions are also consecutive in the input (a kept last dimension copies in runs).
struct PermutePlan {
  int dims = 0;
  int64_t size[kMaxPermuteDims] = {};
  int64_t in_stride[kMaxPermuteDims] = {};
  int64_t numel = 1;
};

// Throws unless perm permutes the dimensions of `in_shape` (at most kMaxPermuteDims) into
// `out_shape`; the names go into the message.
PermutePlan permute_plan(const char* op, const char* in_name, const Shape& in_shape, const char* out_name,
                         const Shape& out_shape, const std::vector<int>& perm);

// ---- broadcast --------------------------------------------------------------------------------
constexpr int kMaxBroadcastDims = 6;
constexpr int kMaxOperands = 3;

// out's dimensions of size > 1, adjacent ones merged where every operand is either full along
// both or broadcast along both; stride[k][d] is operand k's element stride (0 where broadcast).
struct BroadcastLayout {
  int dims = 0, operands = 0;
  int64_t size[kMaxBroadcastDims] = {};
  int64_t stride[kMaxOperands][kMaxBroadcastDims] = {};
  bool full[kMaxOperands][kMaxBroadcastDims] = {};
  int64_t numel = 1;
};

// Throws unless `shape` has out's rank (at most kMaxBroadcastDims) and each dimension equals
// out's or is 1.
void check_broadcasts(const char* op, const char* name, const Shape& shape, const char* out_name, const Shape& out);
// The layout of `operands` (each already checked to broadcast to `out`; at most kMaxOperands,
// operand 0 usually `out` itself) over out. A single element is one dimension of size 1.
BroadcastLayout broadcast_layout(const Shape& out, std::initializer_list<const Shape*> operands);

}  // namespace dpx::ops::plan
