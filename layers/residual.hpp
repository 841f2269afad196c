// Residual joins inside composite blocks (Swin, MBConv, ...): y = x + branch(x) in forward, and
// in backward the gradient reaching x along both paths. The block names its own children as
// torchvision does, so the join is a helper, not a layer of its own.
#pragma once
#include "kernels/ops.hpp"

namespace dpx::nn {

inline void check_residual(const Tensor& x, const Tensor& branch, const std::string& layer) {
  if (x.shape() != branch.shape())
    fail(layer, ": the residual branch gives ", shape_str(branch.shape()), " for input ",
         shape_str(x.shape()), "; both must have the same shape");
}

// A fresh x + branch (same shapes), so neither input is ever written.
inline Tensor residual_add(Context& ctx, const Tensor& x, const Tensor& branch, const std::string& layer) {
  check_residual(x, branch, layer);
  Tensor y = Tensor::empty(x.shape(), DType::f32, ctx.device);
  ops::add(ctx, y, x, branch);
  return y;
}

// A fresh max(branch + x, 0) in `dtype` (ResNet's join and the ReLU after it, ops::add_relu; x may
// be in half precision, and so may the result: kernels/ops.def, "half-precision maps").
inline Tensor residual_add_relu(Context& ctx, const Tensor& x, const Tensor& branch, const std::string& layer,
                                DType dtype) {
  check_residual(x, branch, layer);
  Tensor y = Tensor::empty(x.shape(), dtype, ctx.device);
  ops::add_relu(ctx, y, branch, x);
  return y;
}

// dx_branch += dy: the skip path's gradient joins the one the branch's backward returned
// (a fresh tensor of the block's own, so adding into it is safe).
inline Tensor residual_backward(Context& ctx, Tensor dx_branch, const Tensor& dy) {
  ops::axpy(ctx, dx_branch, 1.f, dy);
  return dx_branch;
}

}  // namespace dpx::nn
