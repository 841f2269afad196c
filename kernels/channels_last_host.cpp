// The permutes of the host backends' channels-last detour (channels_last_host.hpp): plain loops,
// one image at a time, the channel index innermost on the channels-last side.
#include "kernels/channels_last_host.hpp"

#include <cstring>

namespace dpx::kernels {

namespace {
void require_four_byte_map(const char* what, const Tensor& t) {
  DPX_CHECK(t.dim() == 4 && dtype_size(t.dtype()) == 4 && t.device().is_cpu(), what, ": ", shape_str(t.shape()),
            " is not a host image batch of 4-byte elements");
}
}  // namespace

Tensor nchw_like(const Tensor& nhwc) {
  require_four_byte_map("nchw_like", nhwc);
  return Tensor::empty({nhwc.size(0), nhwc.size(3), nhwc.size(1), nhwc.size(2)}, nhwc.dtype(), nhwc.device());
}

Tensor nchw_copy(const Tensor& nhwc) {
  Tensor out = nchw_like(nhwc);
  const int64_t N = nhwc.size(0), H = nhwc.size(1), W = nhwc.size(2), C = nhwc.size(3), HW = H * W;
  const auto* in = static_cast<const uint32_t*>(nhwc.raw());
  auto* o = static_cast<uint32_t*>(out.raw());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < HW; ++p)
      for (int64_t c = 0; c < C; ++c) o[(n * C + c) * HW + p] = in[(n * HW + p) * C + c];
  return out;
}

void nhwc_from(Tensor& nhwc, const Tensor& nchw, ops::DxMode mode) {
  require_four_byte_map("nhwc_from", nhwc);
  require_four_byte_map("nhwc_from", nchw);
  const int64_t N = nhwc.size(0), H = nhwc.size(1), W = nhwc.size(2), C = nhwc.size(3), HW = H * W;
  DPX_CHECK(nchw.shape() == Shape({N, C, H, W}) && nchw.dtype() == nhwc.dtype(), "nhwc_from: ",
            shape_str(nchw.shape()), " is not ", shape_str(nhwc.shape()), " in (N, C, H, W) order");
  if (mode == ops::DxMode::add) {
    float* o = nhwc.data<float>();
    const float* in = nchw.data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < HW; ++p)
        for (int64_t c = 0; c < C; ++c) o[(n * HW + p) * C + c] += in[(n * C + c) * HW + p];
    return;
  }
  auto* o = static_cast<uint32_t*>(nhwc.raw());
  const auto* in = static_cast<const uint32_t*>(nchw.raw());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < HW; ++p)
      for (int64_t c = 0; c < C; ++c) o[(n * HW + p) * C + c] = in[(n * C + c) * HW + p];
}

namespace {
ops::Conv2dParams contiguous_params(ops::Conv2dParams p) {
  p.format = ops::MemoryFormat::contiguous;
  return p;
}
ops::Pool2dParams contiguous_params(ops::Pool2dParams p) {
  p.format = ops::MemoryFormat::contiguous;
  return p;
}
// The NCHW copy of a gradient the op writes (overwrite: uninitialised) or adds into (its values).
Tensor gradient_in(const Tensor& nhwc, ops::DxMode mode) {
  return mode == ops::DxMode::add ? nchw_copy(nhwc) : nchw_like(nhwc);
}
}  // namespace

void conv2d_forward_via_nchw(ConvForward contiguous, Context& ctx, Tensor& y, const Tensor& x, const Tensor& w,
                             const Tensor* b, const ops::Conv2dParams& p) {
  Tensor yc = nchw_like(y);
  contiguous(ctx, yc, nchw_copy(x), w, b, contiguous_params(p));
  nhwc_from(y, yc, ops::DxMode::overwrite);
}

void conv2d_backward_via_nchw(ConvBackward contiguous, Context& ctx, Tensor* dx, Tensor* dw, Tensor* db,
                              const Tensor& dy, const Tensor& x, const Tensor& w, const ops::Conv2dParams& p,
                              ops::DxMode dx_mode) {
  Tensor dxc = dx ? gradient_in(*dx, dx_mode) : Tensor();
  contiguous(ctx, dx ? &dxc : nullptr, dw, db, nchw_copy(dy), nchw_copy(x), w, contiguous_params(p), dx_mode);
  if (dx) nhwc_from(*dx, dxc, ops::DxMode::overwrite);
}

void max_pool2d_forward_via_nchw(MaxPoolForward contiguous, Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x,
                                 const ops::Pool2dParams& p) {
  Tensor yc = nchw_like(y), ac = nchw_like(argmax);
  contiguous(ctx, yc, ac, nchw_copy(x), contiguous_params(p));
  nhwc_from(y, yc, ops::DxMode::overwrite);
  nhwc_from(argmax, ac, ops::DxMode::overwrite);
}

void max_pool2d_backward_via_nchw(MaxPoolBackward contiguous, Context& ctx, Tensor& dx, const Tensor& dy,
                                  const Tensor& argmax, const ops::Pool2dParams& p) {
  Tensor dxc = nchw_copy(dx);  // the op adds into dx
  contiguous(ctx, dxc, nchw_copy(dy), nchw_copy(argmax), contiguous_params(p));
  nhwc_from(dx, dxc, ops::DxMode::overwrite);
}

void adaptive_avg_pool2d_forward_via_nchw(AdaptiveForward contiguous, Context& ctx, Tensor& y, const Tensor& x) {
  Tensor yc = nchw_like(y);
  contiguous(ctx, yc, nchw_copy(x), ops::MemoryFormat::contiguous);
  nhwc_from(y, yc, ops::DxMode::overwrite);
}

void adaptive_avg_pool2d_backward_via_nchw(AdaptiveBackward contiguous, Context& ctx, Tensor& dx, const Tensor& dy) {
  Tensor dxc = nchw_copy(dx);  // the op adds into dx
  contiguous(ctx, dxc, nchw_copy(dy), ops::MemoryFormat::contiguous);
  nhwc_from(dx, dxc, ops::DxMode::overwrite);
}

}  // namespace dpx::kernels
