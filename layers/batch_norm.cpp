// BatchNorm1d/2d: training and eval forward (with a ReLU or SiLU folded in on request), the
// training backward through ops::batch_norm_backward, and the eval backward composed from
// existing ops.
#include "layers/batch_norm.hpp"

#include <cstdio>

#include "kernels/ops.hpp"
#include "layers/layer_util.hpp"

namespace dpx::nn {

namespace {
// Python's repr of a float for the small numbers eps and momentum are: 1e-05, 0.1, 0.001.
std::string py_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

}  // namespace

template <class Self>
BatchNormBase<Self>::BatchNormBase(int64_t num_features, float eps, float momentum)
    : c_(num_features), eps_(eps), momentum_(momentum) {
  DPX_CHECK(num_features > 0, "BatchNorm(", num_features, "): the number of features must be positive");
  DPX_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, "BatchNorm(", num_features, ", eps=", eps,
            ", momentum=", momentum, "): eps must be positive and momentum in [0, 1]");
  this->add_parameter("weight", {c_});
  this->add_parameter("bias", {c_});
  this->add_buffer("running_mean", Tensor::zeros({c_}));
  this->add_buffer("running_var", Tensor::zeros({c_}));
  this->add_buffer("num_batches_tracked", Tensor::zeros({}, DType::i64));
  reset_parameters();
}

template <class Self>
void BatchNormBase<Self>::reset_running_stats() {
  init_constant(running_mean(), 0.f);
  init_constant(running_var(), 1.f);
  init_constant(num_batches_tracked(), 0.f);
}

template <class Self>
void BatchNormBase<Self>::reset_parameters() {
  reset_running_stats();
  init_constant(weight().value, 1.f);
  init_constant(bias().value, 0.f);
}

template <class Self>
void BatchNormBase<Self>::reset_parameters(Rng&) {
  reset_parameters();
}

template <class Self>
std::string BatchNormBase<Self>::describe() const {
  return dpx::detail::concat(this->type_name(), "(", c_, ", eps=", py_float(eps_), ", momentum=",
                        py_float(momentum_), ", affine=True, track_running_stats=True)");
}

template <class Self>
void BatchNormBase<Self>::clear_cache() {
  x_ = save_mean_ = save_invstd_ = Tensor();
  applied_ = ops::Epilogue::none;  // nothing left for a backward to undo
}

template <class Self>
void BatchNormBase<Self>::check_input(const Tensor& x) const {
  if (x.dim() < 2 || x.dim() > 4 || x.size(1) != c_)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected (N, ", c_,
         "), (N, ", c_, ", L) or (N, ", c_, ", H, W)");
}

template <class Self>
Tensor BatchNormBase<Self>::forward(Context& ctx, const Tensor& x) {
  return forward(ctx, x, ops::Epilogue::none);
}

template <class Self>
Tensor BatchNormBase<Self>::forward(Context& ctx, const Tensor& x, ops::Epilogue epilogue, DType y_dtype) {
  if (channels_last_) {
    if (x.dim() != 4 || x.size(3) != c_)
      fail(describe(), " given input ", shape_str(x.shape()), ": expected channels-last (N, H, W, ", c_, ")");
    return forward_checked(ctx, x.view({-1, c_}), epilogue, y_dtype).view(x.shape());
  }
  check_input(x);
  return forward_checked(ctx, x, epilogue, y_dtype);
}

template <class Self>
Tensor BatchNormBase<Self>::forward_prefix(Context& ctx, const Tensor& buf, ops::Epilogue epilogue, DType y_dtype) {
  if (channels_last_) {  // the buffer's rows (N*H*W, Cb), their first C columns
    if (buf.dim() != 4 || buf.size(3) < c_)
      fail(describe(), " given buffer ", shape_str(buf.shape()), ": expected channels-last (N, H, W, C) with C >= ",
           c_, " (its first ", c_, " channels are normalised)");
    Shape y_shape = buf.shape();
    y_shape[3] = c_;
    return forward_checked(ctx, buf.view({-1, buf.size(3)}), epilogue, y_dtype).view(y_shape);
  }
  if (buf.dim() < 2 || buf.dim() > 4 || buf.size(1) < c_)
    fail(describe(), " given buffer ", shape_str(buf.shape()), ": expected (N, C, ...) with C >= ", c_,
         " (its first ", c_, " channels are normalised)");
  return forward_checked(ctx, buf, epilogue, y_dtype);
}

template <class Self>
Tensor BatchNormBase<Self>::forward_checked(Context& ctx, const Tensor& x, ops::Epilogue epilogue, DType y_dtype) {
  Shape y_shape = x.shape();
  y_shape[1] = c_;  // x's first c_ channels (all of them but under forward_prefix)
  Tensor y = Tensor::empty(y_shape, y_dtype, ctx.device);
  trained_forward_ = this->training();
  if (trained_forward_) {
    if (y.numel() / c_ <= 1)
      fail(describe(), " given input ", shape_str(x.shape()),
           ": training needs more than one value per channel (use a larger batch or eval mode)");
    save_mean_ = Tensor::empty({c_}, DType::f32, ctx.device);
    save_invstd_ = Tensor::empty({c_}, DType::f32, ctx.device);
    // num_batches_tracked counted by the op, on the device: no host round trip, no launch of its own.
    ops::batch_norm_forward_train(ctx, y, save_mean_, save_invstd_, running_mean(), running_var(), x, weight().value,
                                  bias().value, momentum_, eps_, &num_batches_tracked(), epilogue);
  } else {
    ops::batch_norm_forward_eval(ctx, y, x, weight().value, bias().value, running_mean(),
                                 running_var(), eps_, epilogue);
  }
  x_ = x;
  applied_ = epilogue;
  return y;
}

template <class Self>
Tensor BatchNormBase<Self>::backward(Context& ctx, const Tensor& dy) {
  return backward(ctx, dy, nullptr);
}

template <class Self>
void BatchNormBase<Self>::check_relu_out(const Tensor* relu_out) const {
  if (relu_out && applied_ != ops::Epilogue::relu)
    fail(describe(), ": backward given a ReLU's output, but the forward applied epilogue ",
         ops::epilogue_name(applied_));
  if (!relu_out && applied_ == ops::Epilogue::relu)
    fail(describe(), ": the forward applied a ReLU (Epilogue::relu), so backward needs that ReLU's output");
}

template <class Self>
Tensor BatchNormBase<Self>::through_activation_eval(Context& ctx, const Tensor& dy, const Tensor* relu_out) {
  if (applied_ == ops::Epilogue::none) return dy;
  Tensor g = Tensor::empty(dy.shape(), DType::f32, ctx.device);
  if (applied_ == ops::Epilogue::relu) {
    // A half-precision output (before a convolution) widened.
    ops::relu_backward(ctx, g, dy, as_f32(ctx, *relu_out), ops::DxMode::overwrite);
    return g;
  }
  Tensor y = Tensor::empty(dy.shape(), DType::f32, ctx.device);  // the SiLU's input, as forward made it
  ops::batch_norm_forward_eval(ctx, y, x_, weight().value, bias().value, running_mean(), running_var(), eps_,
                               ops::Epilogue::none);
  ops::silu_backward(ctx, g, dy, y, ops::DxMode::overwrite);
  return g;
}

template <class Self>
Tensor BatchNormBase<Self>::backward(Context& ctx, const Tensor& dy, const Tensor* relu_out) {
  DPX_CHECK(x_.defined(), describe(), ": backward called before forward");
  check_relu_out(relu_out);
  if (channels_last_ && dy.dim() == 4) {  // forward kept x as rows (N*H*W, C)
    const Tensor rows_out = relu_out ? relu_out->view({-1, c_}) : Tensor();
    return backward(ctx, dy.view({-1, c_}), relu_out ? &rows_out : nullptr).view(dy.shape());
  }
  if (dy.shape() != x_.shape())
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(x_.shape()));
  const FreeSaved free_saved(*this);
  // Eval's backward is composed of ops that take an fp32 dy: a half one (a convolution's dx) widened.
  if (!trained_forward_) return backward_eval(ctx, through_activation_eval(ctx, as_f32(ctx, dy), relu_out));
  // Written over, not added into; in x's dtype (a convolution's bf16/fp16 output gets its
  // gradient in that precision: Conv2d::forward_to_norm).
  Tensor dx = Tensor::empty(x_.shape(), x_.dtype(), ctx.device);
  ops::batch_norm_backward(ctx, &dx, grad_target(weight()), grad_target(bias()), dy, x_,
                           weight().value, save_mean_, save_invstd_, ops::DxMode::overwrite,
                           relu_out, silu_beta());
  this->grad_ready(weight());
  this->grad_ready(bias());
  return dx;
}

template <class Self>
void BatchNormBase<Self>::backward_prefix(Context& ctx, Tensor& grad_buf, const Tensor& dy, const Tensor* relu_out) {
  DPX_CHECK(x_.defined(), describe(), ": backward called before forward");
  check_relu_out(relu_out);
  if (channels_last_ && dy.dim() == 4) {  // forward_prefix kept the buffer as rows (N*H*W, Cb)
    Tensor grad_rows = grad_buf.view({-1, grad_buf.size(3)});
    const Tensor rows_out = relu_out ? relu_out->view({-1, c_}) : Tensor();
    backward_prefix(ctx, grad_rows, dy.view({-1, c_}), relu_out ? &rows_out : nullptr);
    return;
  }
  Shape y_shape = x_.shape();
  y_shape[1] = c_;
  if (dy.shape() != y_shape || grad_buf.shape() != x_.shape())
    fail(describe(), ": backward_prefix given dy ", shape_str(dy.shape()), " and a gradient buffer ",
         shape_str(grad_buf.shape()), ", expected ", shape_str(y_shape), " and ", shape_str(x_.shape()));
  if (!trained_forward_) {  // the composed eval backward, on the prefix copied out
    Tensor x = Tensor::empty(y_shape, DType::f32, ctx.device);
    ops::copy_channels(ctx, x, 0, x_, 0, c_, ops::DxMode::overwrite);
    x_ = x;
    const Tensor dx = backward(ctx, dy, relu_out);
    ops::copy_channels(ctx, grad_buf, 0, dx, 0, c_, ops::DxMode::add);
    return;
  }
  const FreeSaved free_saved(*this);
  ops::batch_norm_backward(ctx, &grad_buf, grad_target(weight()), grad_target(bias()), dy, x_, weight().value,
                           save_mean_, save_invstd_, ops::DxMode::add, relu_out, silu_beta());
  this->grad_ready(weight());
  this->grad_ready(bias());
}

// With running statistics BN is a per-channel affine map y = s * x + t, s = gamma * invstd:
//   dx = s * dy,  dgamma = sum(dy * xhat),  dbeta = sum(dy),  xhat = (x - mean) * invstd.
// ops.hpp has no op for that, so it is composed from ops that exist: a depthwise 1x1
// convolution (groups = C) multiplies each channel by s and sums dy and dy * xhat per channel,
// and the eval op itself computes s (on a row of ones, mean 0, beta 0) and xhat (gamma 1).
template <class Self>
Tensor BatchNormBase<Self>::backward_eval(Context& ctx, const Tensor& dy) {
  x_ = as_f32(ctx, x_);  // a convolution's half-precision output: the composed ops take fp32
  const int64_t n = x_.size(0), spatial = x_.numel() / (n * c_);
  const Shape as_image = {n, c_, spatial, 1};
  ops::Conv2dParams depthwise;
  depthwise.groups = static_cast<int>(c_);

  Tensor ones = Tensor::empty({1, c_}, DType::f32, ctx.device);
  ops::fill(ctx, ones, 1.f);
  Tensor zero_c = zeros_on(ctx, {c_});
  Tensor s = Tensor::empty({1, c_}, DType::f32, ctx.device);  // (1, C) gamma / sqrt(var + eps)
  ops::batch_norm_forward_eval(ctx, s, ones, weight().value, zero_c, zero_c, running_var(), eps_,
                               ops::Epilogue::none);
  Tensor w = s.view({c_, 1, 1, 1});

  Tensor dx = Tensor::empty(x_.shape(), DType::f32, ctx.device);  // written over, not added into
  Tensor dx_image = dx.view(as_image), dy_image = dy.view(as_image);
  ops::conv2d_backward(ctx, &dx_image, nullptr, nullptr, dy_image, x_.view(as_image), w, depthwise,
                       ops::DxMode::overwrite);

  Tensor* dgamma = grad_target(weight());
  Tensor* dbeta = grad_target(bias());
  if (dgamma || dbeta) {
    Tensor xhat = Tensor::empty(x_.shape(), DType::f32, ctx.device);
    ops::batch_norm_forward_eval(ctx, xhat, x_, ones.view({c_}), zero_c, running_mean(),
                                 running_var(), eps_, ops::Epilogue::none);
    Tensor dgamma_w = dgamma ? dgamma->view({c_, 1, 1, 1}) : Tensor();
    ops::conv2d_backward(ctx, nullptr, dgamma ? &dgamma_w : nullptr, dbeta, dy_image,
                         xhat.view(as_image), w, depthwise, ops::DxMode::add);
  }
  this->grad_ready(weight());
  this->grad_ready(bias());
  return dx;
}

template class BatchNormBase<BatchNorm2d>;
template class BatchNormBase<BatchNorm1d>;

}  // namespace dpx::nn
