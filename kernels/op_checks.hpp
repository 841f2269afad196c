// The one validation of each op's arguments: shapes, dtypes and parameters, checked by the op
// layer (kernels/ops.cpp) before any backend runs, so every misuse has one message whichever
// device runs the op. One function per row of kernels/ops.def, with the op's own parameters.
// What only the data can tell (a label or an index out of range) the kernels check themselves.
#pragma once
#include "kernels/ops.hpp"

namespace dpx::ops::check {

#define DPX_OP(ret, name, params, args) void name params;
#include "kernels/ops.def"
#undef DPX_OP

}  // namespace dpx::ops::check
