// MaxPool2d, AvgPool2d and AdaptiveAvgPool2d: the window checks PyTorch makes, output
// shapes, and forward/backward through the pooling ops.
#include "layers/pooling.hpp"

#include "layers/layer_util.hpp"

namespace dpx::nn {

namespace {
ops::Pool2dParams square(int kernel, int stride, int padding, bool ceil_mode, bool count_include_pad) {
  ops::Pool2dParams p;
  p.kernel_h = p.kernel_w = kernel;
  p.stride_h = p.stride_w = stride == 0 ? kernel : stride;
  p.pad_h = p.pad_w = padding;
  p.ceil_mode = ceil_mode;
  p.count_include_pad = count_include_pad;
  return p;
}

// "3" when both sides agree, "(3, 2)" otherwise: what torch prints for what it was given.
std::string int_or_pair(int h, int w) {
  return h == w ? std::to_string(h) : dpx::detail::concat("(", h, ", ", w, ")");
}

std::string window_str(const ops::Pool2dParams& p) {
  return dpx::detail::concat("kernel_size=", int_or_pair(p.kernel_h, p.kernel_w),
                        ", stride=", int_or_pair(p.stride_h, p.stride_w),
                        ", padding=", int_or_pair(p.pad_h, p.pad_w));
}

// The checks torch makes when it builds the op, raised at construction with the layer's name.
void check_window(const std::string& layer, const ops::Pool2dParams& p) {
  if (p.kernel_h <= 0 || p.kernel_w <= 0 || p.stride_h <= 0 || p.stride_w <= 0 || p.pad_h < 0 || p.pad_w < 0)
    fail(layer, ": kernel and stride must be positive and padding non-negative");
  if (2 * p.pad_h > p.kernel_h || 2 * p.pad_w > p.kernel_w)
    fail(layer, ": padding must be at most half the kernel size (as in PyTorch)");
}

Shape pooled_shape(const std::string& layer, const Shape& x, const ops::Pool2dParams& p) {
  if (x.size() != 4)
    fail(layer, " given input ", shape_str(x), ": expected ",
         p.format == ops::MemoryFormat::channels_last ? "channels-last (N, H, W, C)" : "(N, C, H, W)");
  const ops::ImageDims d = ops::image_dims(x, p.format);
  int64_t oh = ops::conv_out_size(d.h, p.kernel_h, p.stride_h, p.pad_h, 1, p.ceil_mode);
  int64_t ow = ops::conv_out_size(d.w, p.kernel_w, p.stride_w, p.pad_w, 1, p.ceil_mode);
  if (oh <= 0 || ow <= 0)
    fail(layer, " given input ", shape_str(x), ": the padded input is smaller than the window");
  return ops::image_shape({d.n, d.c, oh, ow}, p.format);
}

void check_dy(const std::string& layer, const Tensor& dy, const Shape& expected) {
  if (dy.shape() != expected)
    fail(layer, ": backward given dy ", shape_str(dy.shape()), ", expected ", shape_str(expected));
}
}  // namespace

// ---- MaxPool2d ------------------------------------------------------------------------------

MaxPool2d::MaxPool2d(int kernel, int stride, int padding, bool ceil_mode)
    : MaxPool2d(square(kernel, stride, padding, ceil_mode, true)) {}

MaxPool2d::MaxPool2d(const ops::Pool2dParams& p) : p_(p) { check_window(describe(), p_); }

std::string MaxPool2d::describe() const {
  return dpx::detail::concat("MaxPool2d(", window_str(p_), ", dilation=1, ceil_mode=", py_bool(p_.ceil_mode), ")");
}

Tensor MaxPool2d::forward(Context& ctx, const Tensor& x) { return forward(ctx, x, DType::f32); }

Tensor MaxPool2d::forward(Context& ctx, const Tensor& x, DType y_dtype) {
  Shape y_shape = pooled_shape(describe(), x.shape(), p_);
  Tensor y = Tensor::empty(y_shape, y_dtype, ctx.device);
  Tensor argmax = Tensor::empty(y_shape, DType::i32, ctx.device);
  ops::max_pool2d_forward(ctx, y, argmax, x, p_);
  x_shape_ = x.shape();
  argmax_ = argmax;
  return y;
}

Tensor MaxPool2d::backward(Context& ctx, const Tensor& dy) { return backward(ctx, dy, DType::f32); }

Tensor MaxPool2d::backward(Context& ctx, const Tensor& dy, DType dx_dtype) {
  DPX_CHECK(argmax_.defined(), describe(), ": backward called before forward");
  check_dy(describe(), dy, argmax_.shape());
  const FreeSaved free_saved(*this);
  Tensor dx = Tensor::empty(x_shape_, dx_dtype, ctx.device);  // written over: no zero-fill first
  ops::max_pool2d_backward(ctx, dx, dy, argmax_, p_, ops::DxMode::overwrite);
  return dx;
}

// ---- AvgPool2d ------------------------------------------------------------------------------

AvgPool2d::AvgPool2d(int kernel, int stride, int padding, bool ceil_mode, bool count_include_pad)
    : AvgPool2d(square(kernel, stride, padding, ceil_mode, count_include_pad)) {}

AvgPool2d::AvgPool2d(const ops::Pool2dParams& p) : p_(p) { check_window(describe(), p_); }

std::string AvgPool2d::describe() const {
  std::string s = "AvgPool2d(" + window_str(p_);
  // torch's AvgPool2d repr shows only the window; the two flags are shown when not default.
  if (p_.ceil_mode) s += ", ceil_mode=True";
  if (!p_.count_include_pad) s += ", count_include_pad=False";
  return s + ")";
}

Tensor AvgPool2d::forward(Context& ctx, const Tensor& x) {
  Tensor y = Tensor::empty(pooled_shape(describe(), x.shape(), p_), DType::f32, ctx.device);
  ops::avg_pool2d_forward(ctx, y, x, p_);
  x_shape_ = x.shape();
  return y;
}

Tensor AvgPool2d::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(!x_shape_.empty(), describe(), ": backward called before forward");
  check_dy(describe(), dy, pooled_shape(describe(), x_shape_, p_));
  Tensor dx = empty_on(ctx, x_shape_);  // written over: no zero-fill first
  ops::avg_pool2d_backward(ctx, dx, dy, p_, ops::DxMode::overwrite);
  return dx;
}

// ---- AdaptiveAvgPool2d ----------------------------------------------------------------------

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : out_h_(out_h), out_w_(out_w) {
  DPX_CHECK(out_h > 0 && out_w > 0, describe(), ": the output size must be positive");
}

std::string AdaptiveAvgPool2d::describe() const {
  return dpx::detail::concat("AdaptiveAvgPool2d(output_size=(", out_h_, ", ", out_w_, "))");
}

Tensor AdaptiveAvgPool2d::forward(Context& ctx, const Tensor& x) {
  const bool last = format_ == ops::MemoryFormat::channels_last;
  if (x.dim() != 4 || x.size(last ? 1 : 2) == 0 || x.size(last ? 2 : 3) == 0)
    fail(describe(), " given input ", shape_str(x.shape()),
         last ? ": expected channels-last (N, H, W, C) with H, W > 0" : ": expected (N, C, H, W) with H, W > 0");
  const ops::ImageDims d = ops::image_dims(x.shape(), format_);
  Tensor y = Tensor::empty(ops::image_shape({d.n, d.c, out_h_, out_w_}, format_), DType::f32, ctx.device);
  ops::adaptive_avg_pool2d_forward(ctx, y, x, format_);
  x_shape_ = x.shape();
  return y;
}

Tensor AdaptiveAvgPool2d::backward(Context& ctx, const Tensor& dy) {
  DPX_CHECK(!x_shape_.empty(), describe(), ": backward called before forward");
  const ops::ImageDims d = ops::image_dims(x_shape_, format_);
  check_dy(describe(), dy, ops::image_shape({d.n, d.c, out_h_, out_w_}, format_));
  Tensor dx = empty_on(ctx, x_shape_);  // written over: no zero-fill first
  ops::adaptive_avg_pool2d_backward(ctx, dx, dy, format_, ops::DxMode::overwrite);
  return dx;
}

}  // namespace dpx::nn
