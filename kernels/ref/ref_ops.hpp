// Reference implementations of every op: plain single-threaded loops, written to be read and to
// check the CPU and CUDA kernels against. The same signatures as kernels/cpu/cpu_ops.hpp (and
// kernels/ops.hpp, which documents each op), in namespace dpx::ref. They assume valid arguments.
// (For now a copy of cpu_ops.hpp's list; it will be generated from the op table later.)
#pragma once
#include "kernels/ops.hpp"

namespace dpx::ref {
using ops::Conv2dParams;
using ops::Pool2dParams;
using ops::AdamwParams;
using ops::SgdParams;

void fill(Context& ctx, Tensor& out, float value);
void copy(Context& ctx, Tensor& out, const Tensor& in);
void add(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b);
void axpy(Context& ctx, Tensor& y, float alpha, const Tensor& x);
void scale(Context& ctx, Tensor& x, float alpha);
int64_t count_nonfinite(Context& ctx, const Tensor& x);
void linear_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b);
void linear_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy, const Tensor& x, const Tensor& w);
void matmul(Context& ctx, Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta);
void conv2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b, const Conv2dParams& p);
void conv2d_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy, const Tensor& x, const Tensor& w, const Conv2dParams& p);
void max_pool2d_forward(Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x, const Pool2dParams& p);
void max_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& argmax);
void avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Pool2dParams& p);
void avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Pool2dParams& p);
void adaptive_avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x);
void adaptive_avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy);
void batch_norm_forward_train(Context& ctx, Tensor& y, Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean, Tensor& running_var, const Tensor& x, const Tensor& gamma, const Tensor& beta, float momentum, float eps);
void batch_norm_forward_eval(Context& ctx, Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, float eps);
void batch_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd);
void relu_forward(Context& ctx, Tensor& y, const Tensor& x);
void relu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y);
void dropout_forward(Context& ctx, Tensor& y, Tensor& mask, const Tensor& x, float p, uint64_t seed, uint64_t stream);
void dropout_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& mask, float p);
void sigmoid_forward(Context& ctx, Tensor& y, const Tensor& x);
void sigmoid_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y);
void silu_forward(Context& ctx, Tensor& y, const Tensor& x);
void silu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x);
void gelu_forward(Context& ctx, Tensor& y, const Tensor& x);
void gelu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x);
void add_broadcast(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b);
void add_broadcast_backward(Context& ctx, Tensor* da, Tensor* db, const Tensor& dy);
void mul_broadcast(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b);
void mul_broadcast_backward(Context& ctx, Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a, const Tensor& b);
void layer_norm_forward(Context& ctx, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps);
void layer_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd);
void softmax_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor* bias);
void softmax_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y);
void permute(Context& ctx, Tensor& out, const Tensor& in, const std::vector<int>& perm);
void permute_backward(Context& ctx, Tensor& din, const Tensor& dout, const std::vector<int>& perm);
void roll(Context& ctx, Tensor& out, const Tensor& in, int64_t shift_h, int64_t shift_w);
void roll_backward(Context& ctx, Tensor& din, const Tensor& dout, int64_t shift_h, int64_t shift_w);
void pad_hw(Context& ctx, Tensor& out, const Tensor& in);
void pad_hw_backward(Context& ctx, Tensor& din, const Tensor& dout);
void concat_channels(Context& ctx, Tensor& out, const std::vector<Tensor>& inputs);
void split_channels_backward(Context& ctx, const std::vector<Tensor*>& dinputs, const Tensor& dout);
void index_select(Context& ctx, Tensor& out, const Tensor& table, const Tensor& index);
void index_select_backward(Context& ctx, Tensor& dtable, const Tensor& dout, const Tensor& index);
void cross_entropy_forward(Context& ctx, Tensor& loss, Tensor& probs, const Tensor& logits, const Tensor& labels, float label_smoothing);
void cross_entropy_backward(Context& ctx, Tensor& dlogits, const Tensor& probs, const Tensor& labels, float label_smoothing, float scale);
int64_t count_correct(Context& ctx, const Tensor& logits, const Tensor& labels);
void sgd_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p, bool first_step);
void adamw_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamwParams& p, int64_t step);

}  // namespace dpx::ref
