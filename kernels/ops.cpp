// The definition of every op listed in kernels/ops.def, generated from that list: check that
// the tensors live on ctx.device, check shapes and dtypes once (kernels/op_checks.cpp), then run
// the kernel of ctx.device — cpu::, ref:: (ctx.reference) or cuda::.
#include "kernels/ops.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/capture.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/op_checks.hpp"
#include "kernels/op_profile.hpp"
#include "kernels/ref/ref_ops.hpp"
#ifdef DPX_WITH_CUDA
#include "kernels/cuda/cuda_ops.hpp"
#endif

namespace dpx::ops {

namespace {
void check_device(const char* op, const Context& ctx, const Tensor* t) {
  if (t && t->defined() && !(t->device() == ctx.device))
    fail(op, ": a tensor on ", t->device().str(), " was passed to an op running on ",
         ctx.device.str(), "; move it with Tensor::to first");
}

// Every tensor among an op's arguments (Tensor, Tensor*, or a vector of either) must live on
// ctx.device; other arguments are parameters.
template <class T>
void check_device_of(const char* op, const Context& ctx, const T& arg) {
  if constexpr (std::is_same_v<T, Tensor>) {
    check_device(op, ctx, &arg);
  } else if constexpr (std::is_same_v<T, Tensor*> || std::is_same_v<T, const Tensor*>) {
    check_device(op, ctx, arg);
  } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
    for (const Tensor& t : arg) check_device(op, ctx, &t);
  } else if constexpr (std::is_same_v<T, std::vector<Tensor*>>) {
    for (const Tensor* t : arg) check_device(op, ctx, t);
  }
}
template <class... Args>
void check_devices(const char* op, const Context& ctx, const Args&... args) {
  (check_device_of(op, ctx, args), ...);
}

// A call's shape for the op profiler's by-shape totals (`--profile-shapes`): its tensors' shapes
// in argument order ("-" for an absent one, "{3 tensors}" for a list), then the convolution's or
// pooling's parameters; other arguments are left out. For example conv2d_forward's
// "64x64x56x56 64x3x224x224 64x3x7x7 - s2x2 p3x3 d1x1 g1" (y, x, w, no bias, parameters; " nhwc"
// for channels-last maps, " relu" where the ReLU after it is folded in; a batch norm's forward
// ends in " relu" or " silu" likewise).
void describe(std::string& out, const Tensor* t) {
  if (!out.empty()) out += ' ';
  if (!t || !t->defined()) {
    out += '-';
    return;
  }
  for (size_t i = 0; i < t->shape().size(); ++i) {
    if (i) out += 'x';
    out += std::to_string(t->shape()[i]);
  }
  if (t->shape().empty()) out += "scalar";
}
template <class T>
void describe_arg(std::string& out, const T& arg) {
  auto pair = [](int a, int b) { return std::to_string(a) + "x" + std::to_string(b); };
  if constexpr (std::is_same_v<T, Tensor>) {
    describe(out, &arg);
  } else if constexpr (std::is_same_v<T, Tensor*> || std::is_same_v<T, const Tensor*>) {
    describe(out, arg);
  } else if constexpr (std::is_same_v<T, std::vector<Tensor>> || std::is_same_v<T, std::vector<Tensor*>>) {
    out += (out.empty() ? "{" : " {") + std::to_string(arg.size()) + " tensors}";
  } else if constexpr (std::is_same_v<T, Conv2dParams>) {
    out += " s" + pair(arg.stride_h, arg.stride_w) + " p" + pair(arg.pad_h, arg.pad_w) + " d" +
           pair(arg.dilation_h, arg.dilation_w) + " g" + std::to_string(arg.groups) +
           (arg.format == MemoryFormat::channels_last ? " nhwc" : "");
    describe_arg(out, arg.epilogue);
  } else if constexpr (std::is_same_v<T, Epilogue>) {
    if (arg != Epilogue::none) out += std::string(" ") + epilogue_name(arg);
  } else if constexpr (std::is_same_v<T, Pool2dParams>) {
    out += " k" + pair(arg.kernel_h, arg.kernel_w) + " s" + pair(arg.stride_h, arg.stride_w) + " p" +
           pair(arg.pad_h, arg.pad_w) + (arg.format == MemoryFormat::channels_last ? " nhwc" : "");
  }
}
template <class... Args>
std::string op_shape(const Context&, const Args&... args) {
  std::string out;
  (describe_arg(out, args), ...);
  return out;
}

#ifndef DPX_WITH_CUDA
[[noreturn]] void not_built(const char* op) {
  fail("not implemented on CUDA: ", op, " (this dpx was built without CUDA)");
}
#endif
}  // namespace

// The floating-point operations of one call, for the op profiler (a multiply-add counts 2; bias
// additions are left out). Defined for the products; every other op gets the template: -1, none.
// The overloads take exactly the op's parameter types (Tensor* for gradients, not const Tensor*):
// on an exact match overload resolution prefers them to the template.
namespace flops {
#define DPX_OP(ret, name, params, args) \
  template <class... A>                 \
  double name(const A&...) {            \
    return -1;                          \
  }
#include "kernels/ops.def"
#undef DPX_OP

// 2 * N * K * OH * OW * (C_in / groups) * kH * kW, from the output y (or dy) and the weight.
double conv2d_products(const Tensor& y, const Tensor& w) {
  return 2.0 * static_cast<double>(y.numel()) * static_cast<double>(w.size(1) * w.size(2) * w.size(3));
}
double conv2d_forward(const Context&, const Tensor& y, const Tensor&, const Tensor& w, const Tensor*,
                      const Conv2dParams&) {
  return conv2d_products(y, w);
}
// dx and dW each cost a forward's products; only the gradients asked for count.
double conv2d_backward(const Context&, Tensor* dx, Tensor* dw, Tensor*, const Tensor& dy,
                       const Tensor&, const Tensor& w, const Conv2dParams&, DxMode) {
  return conv2d_products(dy, w) * ((dx ? 1 : 0) + (dw ? 1 : 0));
}
// 2 * N * out * in per product.
double linear_forward(const Context&, const Tensor& y, const Tensor& x, const Tensor&, const Tensor*) {
  return 2.0 * static_cast<double>(y.numel()) * static_cast<double>(x.size(-1));
}
double linear_backward(const Context&, Tensor* dx, Tensor* dw, Tensor*, const Tensor& dy,
                       const Tensor& x, const Tensor&, DxMode) {
  return 2.0 * static_cast<double>(dy.numel()) * static_cast<double>(x.size(-1)) * ((dx ? 1 : 0) + (dw ? 1 : 0));
}
// 2 * M * N * K per matrix of the batch: c holds batch * M * N elements.
double matmul(const Context&, const Tensor& c, const Tensor& a, const Tensor&, bool trans_a, bool, float, float) {
  return 2.0 * static_cast<double>(c.numel()) * static_cast<double>(trans_a ? a.size(-2) : a.size(-1));
}
}  // namespace flops

#define DPX_ARGS(...) __VA_ARGS__
#ifdef DPX_WITH_CUDA
#define DPX_RUN_CUDA(name, args) return cuda::name args
#else
#define DPX_RUN_CUDA(name, args) not_built(#name)
#endif

// Each op: run_NAME runs the kernel of ctx.device; NAME checks, then runs it, timed when the op
// profiler is on (kernels/op_profile.hpp) and named for the messages of a capture
// (core/capture.hpp) while one is active.
namespace {
#define DPX_OP(ret, name, params, args)                       \
  ret run_##name params {                                     \
    if (ctx.device.is_cpu())                                  \
      return ctx.reference ? ref::name args : cpu::name args; \
    DPX_RUN_CUDA(name, args);                                 \
  }
#include "kernels/ops.def"
#undef DPX_OP
}  // namespace

#define DPX_OP(ret, name, params, args)                           \
  ret name params {                                               \
    check_devices(#name, DPX_ARGS args);                          \
    check::name args;                                             \
    if (profile::enabled()) [[unlikely]] {                        \
      profile::Call call(ctx, #name, flops::name args,            \
                         profile::by_shape() && profile::counts_now() \
                             ? op_shape args                      \
                             : std::string());                    \
      return run_##name args;                                     \
    }                                                             \
    if (capture::active()) [[unlikely]] {                         \
      capture::Where where("op " #name);                          \
      if constexpr (!std::is_void_v<ret>)                         \
        capture::not_capturable("its result is read on the host"); \
      return run_##name args;                                     \
    }                                                             \
    return run_##name args;                                       \
  }
#include "kernels/ops.def"
#undef DPX_OP

ImageDims image_dims(const Shape& s, MemoryFormat f) {
  DPX_CHECK(s.size() == 4, "image_dims: ", shape_str(s), " is not an image batch (4 dimensions)");
  if (f == MemoryFormat::channels_last) return {s[0], s[3], s[1], s[2]};
  return {s[0], s[1], s[2], s[3]};
}

Shape image_shape(const ImageDims& d, MemoryFormat f) {
  if (f == MemoryFormat::channels_last) return {d.n, d.h, d.w, d.c};
  return {d.n, d.c, d.h, d.w};
}

const char* format_name(MemoryFormat f) { return f == MemoryFormat::channels_last ? "channels_last" : "contiguous"; }

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::relu: return "relu";
    case Epilogue::silu: return "silu";
    case Epilogue::none: break;
  }
  return "none";
}

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

AdamwScalars adamw_scalars_of(const Tensor& scalars) {
  DPX_CHECK(scalars.device().is_cpu() && scalars.dtype() == DType::f32 && scalars.numel() == kAdamwScalars,
            "adamw_scalars_of: ", kAdamwScalars, " f32 on the host");
  AdamwScalars s;
  std::memcpy(&s, scalars.data<float>(), sizeof s);
  return s;
}

}  // namespace dpx::ops
