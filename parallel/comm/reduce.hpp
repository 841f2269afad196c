// The element-wise reductions the collectives apply when a chunk arrives from a peer. Half and
// bfloat16 are combined in f32 and rounded back at every step, as NCCL does; integer sums and
// products wrap around (two's complement) instead of overflowing into undefined behaviour.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/dtype.hpp"

namespace dpx::parallel {

// avg is computed as sum at every step and divided by the number of ranks once at the end.
enum class ReduceOp : uint8_t { sum, prod, max, min, avg };
std::string_view reduce_op_name(ReduceOp op);

// out[i] = a[i] (op) b[i] for i < count. out may alias a or b (element-wise, so in place is fine).
// op must not be avg: the algorithms reduce with sum and call finish_average.
void reduce_into(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

// data[i] /= ranks: integer division for integer types, f32 division for f16/bf16/f32.
void finish_average(void* data, size_t count, DType dtype, int ranks);

}  // namespace dpx::parallel
