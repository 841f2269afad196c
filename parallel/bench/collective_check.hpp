// The benchmark's data and its check (nccl-tests' #wrong). Rank r's element i is 1 + (i + 2r) mod 3,
// or for prod 2 when (i + r) mod 8 == 0 and 1 otherwise: small integers, so every partial
// result is exact in every dtype (bf16 up to 85 ranks: 3 * 85 < 256) and the expected result
// is known in closed form whatever the order of reduction.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "parallel/comm/transport.hpp"

namespace dpx::parallel {

// Writes rank `rank`'s input for element indices [first, first + count) to dst.
void fill_input(void* dst, size_t count, size_t first, DType dtype, ReduceOp op, int rank);

// Elements of got (indices [first, first + count)) that differ bitwise from the reduction of
// every rank's input over `ranks` ranks.
int64_t count_wrong_reduced(const void* got, size_t count, size_t first, DType dtype, ReduceOp op, int ranks);

// Elements of got that differ bitwise from rank `rank`'s input (broadcast, all_gather).
int64_t count_wrong_input(const void* got, size_t count, size_t first, DType dtype, ReduceOp op, int rank);

}  // namespace dpx::parallel
