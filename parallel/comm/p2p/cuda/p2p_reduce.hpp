// The device side of the reductions in parallel/comm/transport.hpp for the p2p backend: the same
// element-wise reductions and the same final division of avg, as kernels on a stream, with the
// same rounding rules (f16 and bf16 combined in f32 and rounded back at every step; integer sums
// and products wrap).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "core/dtype.hpp"
#include "parallel/comm/transport.hpp"

namespace dpx::parallel::cuda_p2p {

// out[i] = a[i] (op) b[i] for i < count, queued on `stream`; out may alias a or b. Device pointers
// (b may be on a peer GPU with peer access enabled). op must not be avg.
void reduce_into(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op,
                 cudaStream_t stream);
// data[i] /= ranks, as finish_average, queued on `stream`.
void finish_average(void* data, size_t count, DType dtype, int ranks, cudaStream_t stream);

}  // namespace dpx::parallel::cuda_p2p
