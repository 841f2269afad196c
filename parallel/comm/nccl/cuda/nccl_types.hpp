// dpx's element types and reductions as NCCL names them. Pure mappings (no CUDA runtime call),
// so the CPU tests of a CUDA build check them; only compiled where nccl.h is (DPX_WITH_CUDA).
#pragma once
#include <nccl.h>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "parallel/comm/transport.hpp"

namespace dpx::parallel::nccl {

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
