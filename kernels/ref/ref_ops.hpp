// The reference kernel of every op, in namespace dpx::ref: plain loops written to be read, forward and
// backward; the oracle the CPU and CUDA kernel tests compare against, and the `--devices ref` device.
// Their signatures and documentation are kernels/ops.def's; this header declares them.
#pragma once
#include "kernels/ops.hpp"

namespace dpx::ref {

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

}  // namespace dpx::ref
