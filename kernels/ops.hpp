// Every operation dpx can compute, forward and backward, as dpx::ops:: functions that run on
// ctx.device: the list itself, with each op's documentation, is kernels/ops.def; this header
// adds the parameter structs the ops take and a few helpers that are not ops.
//
// Each op checks that its tensors live on ctx.device, checks their shapes and dtypes once
// (kernels/op_checks.cpp), then runs cpu:: (kernels/cpu/, the fast CPU kernels), ref::
// (kernels/ref/, plain loops: the oracle of the tests and the `--devices ref` device) or
// cuda:: (kernels/cuda/). On a dpx built without CUDA a CUDA op throws "not implemented on
// CUDA: <op>" — never a silent CPU fallback.
#pragma once
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/context.hpp"
#include "core/tensor.hpp"

namespace dpx::ops {

// How an image batch lies in memory (PyTorch's torch.memory_format): contiguous, (N, C, H, W),
// or channels_last, (N, H, W, C) — a tensor of that shape, for dpx tensors are always packed in
// the order of their shape. The convolution and pooling ops take either (their params' `format`);
// elementwise ops do not care, and batch norm takes a channels-last map viewed as rows (N*H*W, C).
// cuDNN's tensor-core convolutions prefer channels_last (`--memory-format`, docs/cuda.md).
enum class MemoryFormat { contiguous, channels_last };

// An image batch's four sizes, whatever its layout.
struct ImageDims {
  int64_t n = 0, c = 0, h = 0, w = 0;
};
// The sizes of a 4-d tensor of that layout: (N, C, H, W) or (N, H, W, C) read as N, C, H, W.
ImageDims image_dims(const Shape& s, MemoryFormat f);
// The shape a tensor of those sizes has in that layout.
Shape image_shape(const ImageDims& d, MemoryFormat f);
const char* format_name(MemoryFormat f);  // "contiguous", "channels_last"

// What a forward op that offers the choice applies to its output before writing it: nothing,
// max(x, 0), or x * sigmoid(x), so that the activation after it need not read and write the
// tensor again. relu: batch norm (training and eval) and convolution (through Conv2dParams); the
// ReLU layer then keeps that output as its own. silu: batch norm only; no tensor keeps the values
// before the SiLU, and batch_norm_backward recomputes them (its silu_beta). See
// nn::forward_children.
enum class Epilogue { none, relu, silu };
const char* epilogue_name(Epilogue e);  // "none", "relu", "silu"

// x and y in `format`; the weight is (C_out, C_in / groups, kH, kW) in either (PyTorch's layout, so
// that checkpoints and safetensors files do not depend on it).
struct Conv2dParams {
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int groups = 1;
  MemoryFormat format = MemoryFormat::contiguous;
  Epilogue epilogue = Epilogue::none;  // conv2d_forward's output: none or relu (the backward ignores it)
};

// How a backward op that offers the choice writes dx: added into it (ops.def's rule for every
// gradient), or written over it, so that the caller need not zero a fresh dx first (conv2d,
// batch norm and ReLU backward: most of a CNN's input gradients).
enum class DxMode { add, overwrite };

struct Pool2dParams {
  int kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only (PyTorch's default)
  MemoryFormat format = MemoryFormat::contiguous;  // x, y (and dx, dy, argmax) in this layout
};

struct SgdParams {
  float lr = 0.01f, momentum = 0.f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false;
};

// torch.optim.AdamW's defaults.
struct AdamwParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 1e-2f;
};

#define DPX_OP(ret, name, params, args) ret name params;
#include "kernels/ops.def"
#undef DPX_OP

// The same ops with PyTorch's default arguments.
inline void matmul(Context& ctx, Tensor& c, const Tensor& a, const Tensor& b, bool trans_a,
                   bool trans_b, float alpha = 1.f) {
  matmul(ctx, c, a, b, trans_a, trans_b, alpha, 0.f);
}
inline void adaptive_avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x) {
  adaptive_avg_pool2d_forward(ctx, y, x, MemoryFormat::contiguous);
}
inline void adaptive_avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, DxMode dx_mode) {
  adaptive_avg_pool2d_backward(ctx, dx, dy, MemoryFormat::contiguous, dx_mode);
}
inline void cross_entropy_forward(Context& ctx, Tensor& loss, Tensor& probs, const Tensor& logits,
                                  const Tensor& labels) {
  cross_entropy_forward(ctx, loss, probs, logits, labels, 0.f);
}
inline void cross_entropy_backward(Context& ctx, Tensor& dlogits, const Tensor& probs,
                                   const Tensor& labels, float label_smoothing = 0.f) {
  cross_entropy_backward(ctx, dlogits, probs, labels, label_smoothing, 1.f);
}

// ---- helpers that are not ops ---------------------------------------------------------------
// Output size of a convolution or pooling window along one dimension (floor, or ceil_mode).
int64_t conv_out_size(int64_t in, int kernel, int stride, int pad, int dilation,
                      bool ceil_mode = false);

// torch.optim.AdamW's argument checks (lr >= 0, eps >= 0, 0 <= beta < 1, weight_decay >= 0;
// NaN fails them all); throws dpx::Error naming `who` and the bad value.
void check_adamw_params(const AdamwParams& p, const char* who);

// The scalars of one adamw_step, computed in double from the f32 parameters (as torch computes
// them from Python floats) and rounded once to f32, so every backend's kernel shares them.
struct AdamwScalars {
  float decay;                  // 1 - lr * wd
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;              // lr / (1 - b1^step)
  float bias_correction2_sqrt;  // sqrt(1 - b2^step)
  float eps;
};
// Checks p (check_adamw_params) and step >= 1.
AdamwScalars adamw_scalars(const AdamwParams& p, int64_t step);
// adamw_step's `scalars` tensor holds an AdamwScalars as its fields in order, in f32.
constexpr int64_t kAdamwScalars = sizeof(AdamwScalars) / sizeof(float);
static_assert(kAdamwScalars == 8 && std::is_trivially_copyable_v<AdamwScalars>);
// Those fields from a host tensor of kAdamwScalars f32 (the CPU kernels' reading of `scalars`).
AdamwScalars adamw_scalars_of(const Tensor& scalars);

}  // namespace dpx::ops
