// dpx's element types and reductions as NCCL names them (pure mappings, no CUDA runtime call,
// so the CPU tests of a CUDA build check them), and what every NCCL call site shares: the check
// of a queued call, a group, a probe of a communicator's state and the wait until it settles.
// Only compiled where nccl.h is (DPX_WITH_CUDA).
#pragma once
#include <nccl.h>

#include "core/cuda/check.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "parallel/comm/nccl/nccl_wait.hpp"
#include "parallel/comm/transport.hpp"

namespace dpx::parallel::nccl {

// A call on a non-blocking communicator: success or still in progress; anything else throws
// with NCCL's words.
inline void check_queued(ncclResult_t r, const char* expr, const char* file, int line) {
  if (r != ncclSuccess && r != ncclInProgress) cuda::throw_nccl_error(r, expr, file, line);
}
#define DPX_NCCL_QUEUE(expr) ::dpx::parallel::nccl::check_queued((expr), #expr, __FILE__, __LINE__)

// Runs `body`'s NCCL calls as one group (a pattern's sends and receives proceed together; one
// thread starts several communicators); the group is closed if `body` throws.
template <typename F>
void group(F&& body) {
  DPX_NCCL_QUEUE(ncclGroupStart());
  try {
    body();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  DPX_NCCL_QUEUE(ncclGroupEnd());
}

// What ncclCommGetAsyncError says of `comm`, into `probe`; returns the state it read.
inline ncclResult_t probe_comm(ncclComm_t comm, NcclProbe& probe) {
  ncclResult_t state = ncclSuccess;
  probe.comm_failed = ncclCommGetAsyncError(comm, &state) != ncclSuccess;
  probe.comm_in_progress = state == ncclInProgress;
  probe.comm_failed = probe.comm_failed || (state != ncclSuccess && state != ncclInProgress);
  return state;
}

// Waits for a non-blocking call that queues nothing on a stream (a communicator's initialisation,
// its finalize) by poll_until_settled; `state` gets NCCL's last answer.
inline NcclWaitVerdict settle_comm(ncclComm_t comm, double timeout_s, ncclResult_t& state) {
  return poll_until_settled(
      [&] {
        NcclProbe probe;
        probe.stream_idle = true;
        state = probe_comm(comm, probe);
        return probe;
      },
      timeout_s);
}

inline ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  fail("the nccl backend has no NCCL type for dtype #", static_cast<int>(t));
}

// avg is NCCL's ncclAvg (NCCL >= 2.10): the sum divided by the number of ranks, in the element
// type, as dpx's own algorithms compute it.
inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg: return ncclAvg;
  }
  fail("the nccl backend has no NCCL reduction for op #", static_cast<int>(op));
}

}  // namespace dpx::parallel::nccl
