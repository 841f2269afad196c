// Conv2d: construction checks, PyTorch-default initialisation, torch-style description,
// and forward/backward through ops::conv2d_*.
#include "layers/conv2d.hpp"

#include "layers/layer_util.hpp"

namespace dpx::nn {

namespace {
Conv2dOptions square(int kernel, int stride, int padding, int dilation, int groups, bool bias) {
  Conv2dOptions o;
  o.kernel_h = o.kernel_w = kernel;
  o.stride_h = o.stride_w = stride;
  o.pad_h = o.pad_w = padding;
  o.dilation_h = o.dilation_w = dilation;
  o.groups = groups;
  o.bias = bias;
  return o;
}

// "(3, 3)": torch stores every conv setting as a pair and prints it so.
std::string pair_str(int h, int w) {
  return dpx::detail::concat("(", h, ", ", w, ")");
}
}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int kernel, Rng& rng, int stride,
               int padding, int dilation, int groups, bool bias)
    : Conv2d(in_channels, out_channels, square(kernel, stride, padding, dilation, groups, bias), rng) {}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, const Conv2dOptions& options, Rng& rng)
    : in_(in_channels), out_(out_channels), opt_(options) {
  const auto& o = opt_;
  if (in_ <= 0 || out_ <= 0 || o.kernel_h <= 0 || o.kernel_w <= 0 || o.stride_h <= 0 ||
      o.stride_w <= 0 || o.pad_h < 0 || o.pad_w < 0 || o.dilation_h <= 0 || o.dilation_w <= 0 ||
      o.groups <= 0)
    fail(describe(), ": channels, kernel, stride, dilation and groups must be positive and "
         "padding non-negative");
  if (in_ % o.groups != 0 || out_ % o.groups != 0)
    fail(describe(), ": in_channels and out_channels must both be divisible by groups");
  add_parameter("weight", {out_, in_ / o.groups, o.kernel_h, o.kernel_w});
  if (o.bias) add_parameter("bias", {out_});
  reset_parameters(rng);
}

void Conv2d::reset_parameters(Rng& rng) {
  float bound = default_init_bound(in_ / opt_.groups * opt_.kernel_h * opt_.kernel_w);
  init_uniform(weight().value, rng, bound);
  if (opt_.bias) init_uniform(bias()->value, rng, bound);
}

std::string Conv2d::describe() const {
  const auto& o = opt_;
  std::string s = dpx::detail::concat("Conv2d(", in_, ", ", out_, ", kernel_size=",
                                 pair_str(o.kernel_h, o.kernel_w), ", stride=",
                                 pair_str(o.stride_h, o.stride_w));
  // As torch's _ConvNd.extra_repr: settings at their defaults are left out.
  if (o.pad_h || o.pad_w) s += ", padding=" + pair_str(o.pad_h, o.pad_w);
  if (o.dilation_h != 1 || o.dilation_w != 1) s += ", dilation=" + pair_str(o.dilation_h, o.dilation_w);
  if (o.groups != 1) s += dpx::detail::concat(", groups=", o.groups);
  if (!o.bias) s += ", bias=False";
  return s + ")";
}

ops::Conv2dParams Conv2d::kernel_params(ops::Epilogue epilogue) const {
  ops::Conv2dParams p;
  p.epilogue = epilogue;
  p.stride_h = opt_.stride_h;
  p.stride_w = opt_.stride_w;
  p.pad_h = opt_.pad_h;
  p.pad_w = opt_.pad_w;
  p.dilation_h = opt_.dilation_h;
  p.dilation_w = opt_.dilation_w;
  p.groups = opt_.groups;
  p.format = format_;
  return p;
}

Shape Conv2d::output_shape(const Shape& x_shape) const {
  const bool last = format_ == ops::MemoryFormat::channels_last;
  if (x_shape.size() != 4 || x_shape[last ? 3 : 1] != in_)
    fail(describe(), " given input ", shape_str(x_shape), ": expected ", expected_maps(in_, last));
  const ops::ImageDims d = ops::image_dims(x_shape, format_);
  int64_t oh = ops::conv_out_size(d.h, opt_.kernel_h, opt_.stride_h, opt_.pad_h, opt_.dilation_h);
  int64_t ow = ops::conv_out_size(d.w, opt_.kernel_w, opt_.stride_w, opt_.pad_w, opt_.dilation_w);
  if (oh <= 0 || ow <= 0)
    fail(describe(), " given input ", shape_str(x_shape),
         ": the padded input is smaller than the (dilated) kernel; use a larger image");
  return ops::image_shape({d.n, out_, oh, ow}, format_);
}

Tensor Conv2d::forward(Context& ctx, const Tensor& x) { return forward(ctx, x, ops::Epilogue::none); }

Tensor Conv2d::forward_to_norm(Context& ctx, const Tensor& x) {
  const bool half = ctx.compute != DType::f32 && ctx.half_maps;
  return forward(ctx, x, ops::Epilogue::none, half ? ctx.compute : DType::f32);
}

Tensor Conv2d::forward(Context& ctx, const Tensor& x, ops::Epilogue epilogue, DType y_dtype) {
  Tensor y = Tensor::empty(output_shape(x.shape()), y_dtype, ctx.device);
  x_ = x;
  last_flops_ = 2 * y.numel() * (in_ / opt_.groups) * opt_.kernel_h * opt_.kernel_w;
  ops::conv2d_forward(ctx, y, x, weight().value, opt_.bias ? &bias()->value : nullptr, kernel_params(epilogue));
  return y;
}

Tensor Conv2d::backward(Context& ctx, const Tensor& dy) { return backward(ctx, dy, DType::f32); }

Tensor Conv2d::backward(Context& ctx, const Tensor& dy, DType dx_dtype) {
  DPX_CHECK(x_.defined(), describe(), ": backward called before forward");
  // Without a caller for dx (the model's first layer, or the first trainable one after a
  // frozen backbone) only the weight gradients are computed.
  // dx is written over by the op (DxMode::overwrite): no zero-fill first.
  Tensor dx = input_grad_needed() ? Tensor::empty(x_.shape(), dx_dtype, ctx.device) : Tensor();
  backward_into(ctx, dy, dx.defined() ? &dx : nullptr, ops::DxMode::overwrite);
  return dx;
}

void Conv2d::backward_add(Context& ctx, const Tensor& dy, Tensor& into) {
  DPX_CHECK(x_.defined(), describe(), ": backward called before forward");
  check_add_target(describe(), into, x_.shape());
  backward_into(ctx, dy, &into, ops::DxMode::add);
}

void Conv2d::backward_into(Context& ctx, const Tensor& dy, Tensor* dx, ops::DxMode dx_mode) {
  Shape y_shape = output_shape(x_.shape());
  if (dy.shape() != y_shape)
    fail(describe(), ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(y_shape));
  const FreeSaved free_saved(*this);
  Tensor* dw = grad_target(weight());
  Tensor* db = opt_.bias ? grad_target(*bias()) : nullptr;
  ops::conv2d_backward(ctx, dx, dw, db, dy, x_, weight().value, kernel_params(), dx_mode);
  grad_ready(weight());
  if (opt_.bias) grad_ready(*bias());
}

}  // namespace dpx::nn
