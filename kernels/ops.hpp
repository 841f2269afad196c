// The one list of every operation dpx can compute, forward and backward. Each op checks that
// its tensors live on ctx.device and dispatches to cpu:: (kernels/cpu/) or cuda::
// (kernels/cuda/). A missing CUDA implementation throws "not implemented on CUDA: <op>".
//
// Conventions (llm.c): outputs first, then inputs, then parameters. Forward ops overwrite
// their outputs. Backward ops ACCUMULATE (+=) into every gradient they write — dx as well as
// parameter gradients — so callers zero a gradient once and residual branches just add.
// A gradient pointer may be null when that gradient is not needed. CPU kernels compute in f32.
#pragma once
#include <cstdint>

#include "core/context.hpp"
#include "core/tensor.hpp"

namespace dpx::ops {

// ---- elementwise and utility --------------------------------------------------------------
void fill(Context& ctx, Tensor& out, float value);
void copy(Context& ctx, Tensor& out, const Tensor& in);                    // same numel
void add(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b);     // out = a + b
void axpy(Context& ctx, Tensor& y, float alpha, const Tensor& x);          // y += alpha * x
void scale(Context& ctx, Tensor& x, float alpha);                          // x *= alpha

// ---- matrix products ----------------------------------------------------------------------
// y = x W^T + b.  x (N, in), w (out, in), b (out) or null, y (N, out).
void linear_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b);
// dx (N, in) += dy W;  dw (out, in) += dy^T x;  db (out) += sum_n dy.
void linear_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                     const Tensor& x, const Tensor& w);
// c = alpha * op(a) op(b) + beta * c, batched over all leading dimensions (equal in a, b, c).
// a (..., M, K) or (..., K, M) if trans_a; b (..., K, N) or (..., N, K) if trans_b; c (..., M, N).
void matmul(Context& ctx, Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
            float alpha = 1.f, float beta = 0.f);

// ---- convolution --------------------------------------------------------------------------
struct Conv2dParams {
  int stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int groups = 1;
};
// Output size of a convolution or pooling window along one dimension (floor, or ceil_mode).
int64_t conv_out_size(int64_t in, int kernel, int stride, int pad, int dilation, bool ceil_mode = false);
// x (N, C_in, H, W), w (C_out, C_in / groups, kH, kW), b (C_out) or null, y (N, C_out, OH, OW).
void conv2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b,
                    const Conv2dParams& p);
void conv2d_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                     const Tensor& x, const Tensor& w, const Conv2dParams& p);

// ---- pooling ------------------------------------------------------------------------------
struct Pool2dParams {
  int kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only (PyTorch's default)
};
// y (N, C, OH, OW); argmax (same shape as y, i32): the flat h*W+w index of each maximum.
void max_pool2d_forward(Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x, const Pool2dParams& p);
void max_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& argmax);
void avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Pool2dParams& p);
void avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Pool2dParams& p);
// Output size is y's (N, C, OH, OW); bins as PyTorch: [floor(i*H/OH), ceil((i+1)*H/OH)).
void adaptive_avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x);
void adaptive_avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy);

// ---- batch normalisation (over N, H, W for each channel of x (N, C, ...)) -------------------
// Training: normalises with the batch statistics, saves mean and 1/sqrt(var+eps) (C) for
// backward, and updates running_mean/var with the unbiased variance (as PyTorch).
void batch_norm_forward_train(Context& ctx, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                              Tensor& running_mean, Tensor& running_var, const Tensor& x,
                              const Tensor& gamma, const Tensor& beta, float momentum, float eps);
void batch_norm_forward_eval(Context& ctx, Tensor& y, const Tensor& x, const Tensor& gamma,
                             const Tensor& beta, const Tensor& running_mean,
                             const Tensor& running_var, float eps);
void batch_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                         const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                         const Tensor& save_invstd);

// ---- activations and regularisation -------------------------------------------------------
void relu_forward(Context& ctx, Tensor& y, const Tensor& x);
void relu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y);  // uses output
// mask (u8, like x): 1 where kept. Kept values are scaled by 1/(1-p). The mask bit of element i
// comes from Rng(seed, stream) counter i, so it does not depend on the number of threads.
void dropout_forward(Context& ctx, Tensor& y, Tensor& mask, const Tensor& x, float p,
                     uint64_t seed, uint64_t stream);
void dropout_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& mask, float p);

// ---- loss ---------------------------------------------------------------------------------
// Softmax cross-entropy, mean over the batch. logits (N, C) f32, labels (N) i64 in [0, C).
// loss (1) receives the mean loss; probs (N, C) the softmax, kept for backward.
void cross_entropy_forward(Context& ctx, Tensor& loss, Tensor& probs, const Tensor& logits,
                           const Tensor& labels, float label_smoothing = 0.f);
// dlogits += scale * d(mean loss)/d(logits).
void cross_entropy_backward(Context& ctx, Tensor& dlogits, const Tensor& probs, const Tensor& labels,
                            float label_smoothing = 0.f, float scale = 1.f);
// Number of rows whose arg-max equals the label (for accuracy).
int64_t count_correct(Context& ctx, const Tensor& logits, const Tensor& labels);

// ---- optimizer ----------------------------------------------------------------------------
struct SgdParams {
  float lr = 0.01f, momentum = 0.f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false;
};
// torch.optim.SGD, one tensor (any shape; typically a range of the flat parameter buffer):
//   g = grad + wd * param; buf = first ? g : momentum * buf + (1 - dampening) * g;
//   g = nesterov ? g + momentum * buf : buf (when momentum != 0); param -= lr * g.
void sgd_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& momentum_buf,
              const SgdParams& p, bool first_step);

}  // namespace dpx::ops
