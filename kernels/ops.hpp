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
#include <vector>

#include "core/context.hpp"
#include "core/tensor.hpp"

namespace dpx::ops {

// ---- elementwise and utility --------------------------------------------------------------
void fill(Context& ctx, Tensor& out, float value);
void copy(Context& ctx, Tensor& out, const Tensor& in);                    // same numel
void add(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b);     // out = a + b
void axpy(Context& ctx, Tensor& y, float alpha, const Tensor& x);          // y += alpha * x
void scale(Context& ctx, Tensor& x, float alpha);                          // x *= alpha
// The number of elements of x (f32) that are NaN or infinite: the divergence guard's check of a
// step's gradients and of loaded weights. Waits for the device (the count is read on the host).
int64_t count_nonfinite(Context& ctx, const Tensor& x);

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

// Smooth activations (torch.nn.Sigmoid, SiLU, and GELU in its exact erf form, GELU's default).
void sigmoid_forward(Context& ctx, Tensor& y, const Tensor& x);
void sigmoid_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y);  // uses output
void silu_forward(Context& ctx, Tensor& y, const Tensor& x);                        // x * sigmoid(x)
void silu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x);
void gelu_forward(Context& ctx, Tensor& y, const Tensor& x);  // x/2 * (1 + erf(x / sqrt 2))
void gelu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x);

// ---- broadcasting elementwise -------------------------------------------------------------
// out = a + b and out = a * b, where a and b each broadcast to out: the same number of
// dimensions (at most 6), each equal to out's or 1 (numpy's rule without implicit leading
// dimensions: view first). Squeeze-excitation scales x (N, C, H, W) by s (N, C, 1, 1),
// stochastic depth by a per-sample (N, 1, 1, 1), Swin adds a position bias (1, heads, L, L)
// to a window mask (nW, 1, L, L).
void add_broadcast(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b);
// da += dy summed over the dimensions a was broadcast along; likewise db.
void add_broadcast_backward(Context& ctx, Tensor* da, Tensor* db, const Tensor& dy);
void mul_broadcast(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b);
// da += dy * b summed over a's broadcast dimensions; db += dy * a over b's.
void mul_broadcast_backward(Context& ctx, Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                            const Tensor& b);

// ---- normalisation over the last dimension, softmax ---------------------------------------
// torch.nn.LayerNorm(D): each row of x (..., D) becomes (x - mean) * rstd * gamma + beta, with
// rstd = 1 / sqrt(biased variance + eps). mean and rstd (rows = numel / D) are saved for backward.
void layer_norm_forward(Context& ctx, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                        const Tensor& gamma, const Tensor& beta, float eps);
// With xhat = (x - mean) * rstd and g = dy * gamma, per row: dx (..., D) += rstd * (g - mean(g)
// - xhat * mean(g * xhat));  dgamma (D) += sum over rows of dy * xhat;  dbeta (D) += sum of dy.
void layer_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                         const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd);
// y = softmax(x + bias) over the last dimension of x (..., L). bias, when given, has the shape
// of x's trailing dimensions and is added at every leading index: attention scores
// (B, heads, L, L) plus a position bias (heads, L, L).
void softmax_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor* bias);
// dx += y * (dy - sum(dy * y)) along each row; also the gradient of the bias before its sum
// over the leading dimensions (add_broadcast_backward takes that sum).
void softmax_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y);

// ---- layout: permute, roll, pad, concatenate, gather --------------------------------------
// out = in.permute(perm) made contiguous, for at most 6 dimensions; out has in's dimensions
// in the order perm gives (torch.permute). Window partitions and attention heads use it.
void permute(Context& ctx, Tensor& out, const Tensor& in, const std::vector<int>& perm);
// din += dout permuted back: dout has the permuted shape, din the original one.
void permute_backward(Context& ctx, Tensor& din, const Tensor& dout, const std::vector<int>& perm);
// torch.roll(in, (shift_h, shift_w), dims=(1, 2)) for in and out (A, H, W, B): channels-last
// maps as Swin uses, or NCHW viewed as (N*C, H, W, 1). Shifts may be negative or exceed H, W.
void roll(Context& ctx, Tensor& out, const Tensor& in, int64_t shift_h, int64_t shift_w);
// din += dout rolled back by (-shift_h, -shift_w).
void roll_backward(Context& ctx, Tensor& din, const Tensor& dout, int64_t shift_h, int64_t shift_w);
// out (A, H2, W2, B) = in (A, H, W, B) with zeros below and to the right (H2 >= H, W2 >= W),
// as F.pad(in, (0, 0, 0, W2 - W, 0, H2 - H)) on channels-last maps.
void pad_hw(Context& ctx, Tensor& out, const Tensor& in);
// din (A, H, W, B) += dout (A, H2, W2, B)[:, :H, :W]: pad_hw's backward, and also a crop.
void pad_hw_backward(Context& ctx, Tensor& din, const Tensor& dout);
// out (N, C1 + C2 + ..., ...) = the inputs (N, Ci, ...) side by side along dimension 1
// (torch.cat(inputs, 1), as DenseNet joins feature maps); trailing dimensions must agree.
void concat_channels(Context& ctx, Tensor& out, const std::vector<Tensor>& inputs);
// dinputs[i] (N, Ci, ...) += dout's channels for input i. Every entry must be given: its
// shape says which channels are its.
void split_channels_backward(Context& ctx, const std::vector<Tensor*>& dinputs, const Tensor& dout);
// out (n, D) = rows index (n, i64, each in [0, R)) of table (R, D): torch.index_select(table,
// 0, index), as Swin reads its relative position bias table.
void index_select(Context& ctx, Tensor& out, const Tensor& table, const Tensor& index);
// dtable (R, D) += dout (n, D) scattered to the rows index names (repeats add up).
void index_select_backward(Context& ctx, Tensor& dtable, const Tensor& dout, const Tensor& index);

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

// torch.optim.AdamW's defaults.
struct AdamwParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 1e-2f;
};
// torch.optim.AdamW's argument checks (lr >= 0, eps >= 0, 0 <= beta < 1, weight_decay >= 0;
// NaN fails them all); throws dpx::Error naming `who` and the bad value.
void check_adamw_params(const AdamwParams& p, const char* who);
// torch.optim.AdamW's single-tensor step (amsgrad and maximize off), one tensor (typically a
// range of the flat parameter buffer); `step` is 1-based, counting this step:
//   param *= 1 - lr * wd; exp_avg = b1 exp_avg + (1 - b1) g; exp_avg_sq = b2 exp_avg_sq + (1 - b2) g^2;
//   param -= lr / (1 - b1^step) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - b2^step) + eps).
// exp_avg and exp_avg_sq (same numel as param) start at zero, as torch creates them.
void adamw_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                const AdamwParams& p, int64_t step);
// The scalars of one adamw_step, computed in double from the f32 parameters (as torch computes
// them from Python floats) and rounded once to f32, so the CPU and CUDA kernels share them.
struct AdamwScalars {
  float decay;                  // 1 - lr * wd
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;              // lr / (1 - b1^step)
  float bias_correction2_sqrt;  // sqrt(1 - b2^step)
  float eps;
};
// Checks p (check_adamw_params) and step >= 1.
AdamwScalars adamw_scalars(const AdamwParams& p, int64_t step);

}  // namespace dpx::ops
