// The CPU kernel of every op (Eigen for matrix products, OpenMP over ctx.threads), dpx::cpu::.
// Their signatures and documentation are kernels/ops.def's; this header declares them.
#pragma once
#include "kernels/ops.hpp"

namespace dpx::cpu {

using ops::AdamwParams;
using ops::Conv2dParams;
using ops::DxMode;
using ops::Epilogue;
using ops::MemoryFormat;
using ops::Pool2dParams;
using ops::SgdParams;

#define DPX_OP(ret, name, params, args) ret name params;
#include "kernels/ops.def"
#undef DPX_OP

}  // namespace dpx::cpu
