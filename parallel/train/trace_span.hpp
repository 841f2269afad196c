// The spans of a traced step beside its phases (dpx train --trace): what the Reducer, the loader
// and the op profiler saw, as the trace writer (parallel/bench/report_io.hpp) draws them.
#pragma once
#include <cstdint>

namespace dpx::parallel {

// What a traced step did beside its phases (--trace), each on a track of its rank's: a DDP
// bucket's all-reduce on the communication thread, a batch a loader worker made, and with
// --profile-ops every op. Trivially copyable: under MPI they travel to rank 0 as bytes.
struct TraceSpan {
  enum class Kind : int32_t { bucket, batch, op };
  Kind kind = Kind::bucket;
  int rank = 0;
  int64_t global_step = 0;  // the step that ran it (a batch: the step it was loaded for)
  int index = 0;  // bucket: its index; batch: the loader worker (-1: none); op: its row of kernels/ops.def
  double start_s = 0;   // steady-clock time it began, on rank 0's clock (the Reducer's: its own)
  double seconds = 0;
  uint64_t bytes = 0;   // bucket: what this rank sent for it
  int64_t count = 0;    // bucket: gradients in it; batch: its images
};

}  // namespace dpx::parallel
