// Dispatch of every op in kernels/ops.hpp to cpu:: or cuda:: by the device of ctx, after
// checking that the tensors given live there.
#include "kernels/ops.hpp"

#include <cmath>
#include <initializer_list>

#include "kernels/cpu/cpu_ops.hpp"
#ifdef DPX_WITH_CUDA
#include "kernels/cuda/cuda_ops.hpp"
#endif

namespace dpx::ops {

namespace {
void check_devices(const Context& ctx, const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t && t->defined() && !(t->device() == ctx.device))
      fail(op, ": a tensor on ", t->device().str(), " was passed to an op running on ",
           ctx.device.str(), "; move it with Tensor::to first");
}
#ifndef DPX_WITH_CUDA
[[noreturn]] void not_built(const char* op) {
  fail("not implemented on CUDA: ", op, " (this dpx was built without CUDA)");
}
#endif
}  // namespace

#ifdef DPX_WITH_CUDA
#define DPX_DISPATCH(op, ...) \
  return ctx.device.is_cpu() ? cpu::op(ctx, __VA_ARGS__) : cuda::op(ctx, __VA_ARGS__)
#else
#define DPX_DISPATCH(op, ...)                                   \
  do {                                                          \
    if (ctx.device.is_cpu()) return cpu::op(ctx, __VA_ARGS__);  \
    not_built(#op);                                             \
  } while (0)
#endif

int64_t conv_out_size(int64_t in, int kernel, int stride, int pad, int dilation, bool ceil_mode) {
  DPX_CHECK(stride > 0 && kernel > 0 && dilation > 0, "window kernel ", kernel, ", stride ", stride,
            ", dilation ", dilation, " must be positive");
  int64_t span = static_cast<int64_t>(dilation) * (kernel - 1) + 1;
  int64_t num = in + 2 * pad - span + (ceil_mode ? stride - 1 : 0);
  // PyTorch's pooling_output_shape divides rounding towards -infinity: with ceil_mode an input
  // shorter than the window still gives one (clipped) window, as SqueezeNet's last pooling
  // sees at its minimum size (2 pixels under a 3x3 window).
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (out <= 0) return 0;
  // PyTorch: with ceil_mode the last window must start inside the input or left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

void fill(Context& ctx, Tensor& out, float value) {
  check_devices(ctx, "fill", {&out});
  DPX_DISPATCH(fill, out, value);
}

void copy(Context& ctx, Tensor& out, const Tensor& in) {
  check_devices(ctx, "copy", {&out, &in});
  DPX_DISPATCH(copy, out, in);
}

void add(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  check_devices(ctx, "add", {&out, &a, &b});
  DPX_DISPATCH(add, out, a, b);
}

void axpy(Context& ctx, Tensor& y, float alpha, const Tensor& x) {
  check_devices(ctx, "axpy", {&y, &x});
  DPX_DISPATCH(axpy, y, alpha, x);
}

void scale(Context& ctx, Tensor& x, float alpha) {
  check_devices(ctx, "scale", {&x});
  DPX_DISPATCH(scale, x, alpha);
}

int64_t count_nonfinite(Context& ctx, const Tensor& x) {
  check_devices(ctx, "count_nonfinite", {&x});
  DPX_DISPATCH(count_nonfinite, x);
}

void linear_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b) {
  check_devices(ctx, "linear_forward", {&y, &x, &w, b});
  DPX_DISPATCH(linear_forward, y, x, w, b);
}

void linear_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy, const Tensor& x, const Tensor& w) {
  check_devices(ctx, "linear_backward", {dx, dw, db, &dy, &x, &w});
  DPX_DISPATCH(linear_backward, dx, dw, db, dy, x, w);
}

void matmul(Context& ctx, Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta) {
  check_devices(ctx, "matmul", {&c, &a, &b});
  DPX_DISPATCH(matmul, c, a, b, trans_a, trans_b, alpha, beta);
}

void conv2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b, const Conv2dParams& p) {
  check_devices(ctx, "conv2d_forward", {&y, &x, &w, b});
  DPX_DISPATCH(conv2d_forward, y, x, w, b, p);
}

void conv2d_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  check_devices(ctx, "conv2d_backward", {dx, dw, db, &dy, &x, &w});
  DPX_DISPATCH(conv2d_backward, dx, dw, db, dy, x, w, p);
}

void max_pool2d_forward(Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x, const Pool2dParams& p) {
  check_devices(ctx, "max_pool2d_forward", {&y, &argmax, &x});
  DPX_DISPATCH(max_pool2d_forward, y, argmax, x, p);
}

void max_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& argmax) {
  check_devices(ctx, "max_pool2d_backward", {&dx, &dy, &argmax});
  DPX_DISPATCH(max_pool2d_backward, dx, dy, argmax);
}

void avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Pool2dParams& p) {
  check_devices(ctx, "avg_pool2d_forward", {&y, &x});
  DPX_DISPATCH(avg_pool2d_forward, y, x, p);
}

void avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Pool2dParams& p) {
  check_devices(ctx, "avg_pool2d_backward", {&dx, &dy});
  DPX_DISPATCH(avg_pool2d_backward, dx, dy, p);
}

void adaptive_avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x) {
  check_devices(ctx, "adaptive_avg_pool2d_forward", {&y, &x});
  DPX_DISPATCH(adaptive_avg_pool2d_forward, y, x);
}

void adaptive_avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy) {
  check_devices(ctx, "adaptive_avg_pool2d_backward", {&dx, &dy});
  DPX_DISPATCH(adaptive_avg_pool2d_backward, dx, dy);
}

void batch_norm_forward_train(Context& ctx, Tensor& y, Tensor& save_mean, Tensor& save_invstd, Tensor& running_mean, Tensor& running_var, const Tensor& x, const Tensor& gamma, const Tensor& beta, float momentum, float eps) {
  check_devices(ctx, "batch_norm_forward_train", {&y, &save_mean, &save_invstd, &running_mean, &running_var, &x, &gamma, &beta});
  DPX_DISPATCH(batch_norm_forward_train, y, save_mean, save_invstd, running_mean, running_var, x, gamma, beta, momentum, eps);
}

void batch_norm_forward_eval(Context& ctx, Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean, const Tensor& running_var, float eps) {
  check_devices(ctx, "batch_norm_forward_eval", {&y, &x, &gamma, &beta, &running_mean, &running_var});
  DPX_DISPATCH(batch_norm_forward_eval, y, x, gamma, beta, running_mean, running_var, eps);
}

void batch_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd) {
  check_devices(ctx, "batch_norm_backward", {dx, dgamma, dbeta, &dy, &x, &gamma, &save_mean, &save_invstd});
  DPX_DISPATCH(batch_norm_backward, dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd);
}

void relu_forward(Context& ctx, Tensor& y, const Tensor& x) {
  check_devices(ctx, "relu_forward", {&y, &x});
  DPX_DISPATCH(relu_forward, y, x);
}

void relu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y) {
  check_devices(ctx, "relu_backward", {&dx, &dy, &y});
  DPX_DISPATCH(relu_backward, dx, dy, y);
}

void dropout_forward(Context& ctx, Tensor& y, Tensor& mask, const Tensor& x, float p, uint64_t seed, uint64_t stream) {
  check_devices(ctx, "dropout_forward", {&y, &mask, &x});
  DPX_DISPATCH(dropout_forward, y, mask, x, p, seed, stream);
}

void dropout_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& mask, float p) {
  check_devices(ctx, "dropout_backward", {&dx, &dy, &mask});
  DPX_DISPATCH(dropout_backward, dx, dy, mask, p);
}

void sigmoid_forward(Context& ctx, Tensor& y, const Tensor& x) {
  check_devices(ctx, "sigmoid_forward", {&y, &x});
  DPX_DISPATCH(sigmoid_forward, y, x);
}

void sigmoid_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y) {
  check_devices(ctx, "sigmoid_backward", {&dx, &dy, &y});
  DPX_DISPATCH(sigmoid_backward, dx, dy, y);
}

void silu_forward(Context& ctx, Tensor& y, const Tensor& x) {
  check_devices(ctx, "silu_forward", {&y, &x});
  DPX_DISPATCH(silu_forward, y, x);
}

void silu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_devices(ctx, "silu_backward", {&dx, &dy, &x});
  DPX_DISPATCH(silu_backward, dx, dy, x);
}

void gelu_forward(Context& ctx, Tensor& y, const Tensor& x) {
  check_devices(ctx, "gelu_forward", {&y, &x});
  DPX_DISPATCH(gelu_forward, y, x);
}

void gelu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_devices(ctx, "gelu_backward", {&dx, &dy, &x});
  DPX_DISPATCH(gelu_backward, dx, dy, x);
}

void add_broadcast(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  check_devices(ctx, "add_broadcast", {&out, &a, &b});
  DPX_DISPATCH(add_broadcast, out, a, b);
}

void add_broadcast_backward(Context& ctx, Tensor* da, Tensor* db, const Tensor& dy) {
  check_devices(ctx, "add_broadcast_backward", {da, db, &dy});
  DPX_DISPATCH(add_broadcast_backward, da, db, dy);
}

void mul_broadcast(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  check_devices(ctx, "mul_broadcast", {&out, &a, &b});
  DPX_DISPATCH(mul_broadcast, out, a, b);
}

void mul_broadcast_backward(Context& ctx, Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a, const Tensor& b) {
  check_devices(ctx, "mul_broadcast_backward", {da, db, &dy, &a, &b});
  DPX_DISPATCH(mul_broadcast_backward, da, db, dy, a, b);
}

void layer_norm_forward(Context& ctx, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  check_devices(ctx, "layer_norm_forward", {&y, &mean, &rstd, &x, &gamma, &beta});
  DPX_DISPATCH(layer_norm_forward, y, mean, rstd, x, gamma, beta, eps);
}

void layer_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd) {
  check_devices(ctx, "layer_norm_backward", {dx, dgamma, dbeta, &dy, &x, &gamma, &mean, &rstd});
  DPX_DISPATCH(layer_norm_backward, dx, dgamma, dbeta, dy, x, gamma, mean, rstd);
}

void softmax_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor* bias) {
  check_devices(ctx, "softmax_forward", {&y, &x, bias});
  DPX_DISPATCH(softmax_forward, y, x, bias);
}

void softmax_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y) {
  check_devices(ctx, "softmax_backward", {&dx, &dy, &y});
  DPX_DISPATCH(softmax_backward, dx, dy, y);
}

void permute(Context& ctx, Tensor& out, const Tensor& in, const std::vector<int>& perm) {
  check_devices(ctx, "permute", {&out, &in});
  DPX_DISPATCH(permute, out, in, perm);
}

void permute_backward(Context& ctx, Tensor& din, const Tensor& dout, const std::vector<int>& perm) {
  check_devices(ctx, "permute_backward", {&din, &dout});
  DPX_DISPATCH(permute_backward, din, dout, perm);
}

void roll(Context& ctx, Tensor& out, const Tensor& in, int64_t shift_h, int64_t shift_w) {
  check_devices(ctx, "roll", {&out, &in});
  DPX_DISPATCH(roll, out, in, shift_h, shift_w);
}

void roll_backward(Context& ctx, Tensor& din, const Tensor& dout, int64_t shift_h, int64_t shift_w) {
  check_devices(ctx, "roll_backward", {&din, &dout});
  DPX_DISPATCH(roll_backward, din, dout, shift_h, shift_w);
}

void pad_hw(Context& ctx, Tensor& out, const Tensor& in) {
  check_devices(ctx, "pad_hw", {&out, &in});
  DPX_DISPATCH(pad_hw, out, in);
}

void pad_hw_backward(Context& ctx, Tensor& din, const Tensor& dout) {
  check_devices(ctx, "pad_hw_backward", {&din, &dout});
  DPX_DISPATCH(pad_hw_backward, din, dout);
}

void index_select(Context& ctx, Tensor& out, const Tensor& table, const Tensor& index) {
  check_devices(ctx, "index_select", {&out, &table, &index});
  DPX_DISPATCH(index_select, out, table, index);
}

void index_select_backward(Context& ctx, Tensor& dtable, const Tensor& dout, const Tensor& index) {
  check_devices(ctx, "index_select_backward", {&dtable, &dout, &index});
  DPX_DISPATCH(index_select_backward, dtable, dout, index);
}

void concat_channels(Context& ctx, Tensor& out, const std::vector<Tensor>& inputs) {
  check_devices(ctx, "concat_channels", {&out});
  for (const Tensor& t : inputs) check_devices(ctx, "concat_channels", {&t});
  DPX_DISPATCH(concat_channels, out, inputs);
}

void split_channels_backward(Context& ctx, const std::vector<Tensor*>& dinputs, const Tensor& dout) {
  check_devices(ctx, "split_channels_backward", {&dout});
  for (const Tensor* t : dinputs) check_devices(ctx, "split_channels_backward", {t});
  DPX_DISPATCH(split_channels_backward, dinputs, dout);
}

void cross_entropy_forward(Context& ctx, Tensor& loss, Tensor& probs, const Tensor& logits, const Tensor& labels, float label_smoothing) {
  check_devices(ctx, "cross_entropy_forward", {&loss, &probs, &logits, &labels});
  DPX_DISPATCH(cross_entropy_forward, loss, probs, logits, labels, label_smoothing);
}

void cross_entropy_backward(Context& ctx, Tensor& dlogits, const Tensor& probs, const Tensor& labels, float label_smoothing, float scale) {
  check_devices(ctx, "cross_entropy_backward", {&dlogits, &probs, &labels});
  DPX_DISPATCH(cross_entropy_backward, dlogits, probs, labels, label_smoothing, scale);
}

int64_t count_correct(Context& ctx, const Tensor& logits, const Tensor& labels) {
  check_devices(ctx, "count_correct", {&logits, &labels});
  DPX_DISPATCH(count_correct, logits, labels);
}

void sgd_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p, bool first_step) {
  check_devices(ctx, "sgd_step", {&param, &grad, &momentum_buf});
  DPX_DISPATCH(sgd_step, param, grad, momentum_buf, p, first_step);
}

void check_adamw_params(const AdamwParams& p, const char* who) {
  // torch.optim.AdamW's constructor checks, written so that NaN fails them as it does there.
  if (!(p.lr >= 0.f)) fail(who, ": invalid learning rate ", p.lr, " (must be >= 0)");
  if (!(p.eps >= 0.f)) fail(who, ": invalid epsilon ", p.eps, " (must be >= 0)");
  if (!(p.beta1 >= 0.f && p.beta1 < 1.f)) fail(who, ": invalid beta1 ", p.beta1, " (must be in [0, 1))");
  if (!(p.beta2 >= 0.f && p.beta2 < 1.f)) fail(who, ": invalid beta2 ", p.beta2, " (must be in [0, 1))");
  if (!(p.weight_decay >= 0.f)) fail(who, ": invalid weight_decay ", p.weight_decay, " (must be >= 0)");
}

AdamwScalars adamw_scalars(const AdamwParams& p, int64_t step) {
  check_adamw_params(p, "adamw_step");
  if (step < 1) fail("adamw_step: step ", step, " must be >= 1 (it counts this step, as torch's state['step'])");
  const double lr = p.lr, b1 = p.beta1, b2 = p.beta2, t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(b1, t), bias_correction2 = 1.0 - std::pow(b2, t);
  AdamwScalars s;
  s.decay = static_cast<float>(1.0 - lr * p.weight_decay);
  s.beta1 = p.beta1;
  s.one_minus_beta1 = static_cast<float>(1.0 - b1);
  s.beta2 = p.beta2;
  s.one_minus_beta2 = static_cast<float>(1.0 - b2);
  s.step_size = static_cast<float>(lr / bias_correction1);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = p.eps;
  return s;
}

void adamw_step(Context& ctx, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                const AdamwParams& p, int64_t step) {
  check_devices(ctx, "adamw_step", {&param, &grad, &exp_avg, &exp_avg_sq});
  DPX_DISPATCH(adamw_step, param, grad, exp_avg, exp_avg_sq, p, step);
}

}  // namespace dpx::ops
