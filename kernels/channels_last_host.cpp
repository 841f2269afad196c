// The permutes of the host backends' channels-last detour (channels_last_host.hpp): each image's
// transpose in tiles, on the rank's threads, and the detour around each op.
#include "kernels/channels_last_host.hpp"

#include <algorithm>
#include <cstdint>

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

namespace {
// Each image's (HW, C) matrix of `rows` (channels-last) against its (C, HW) one (contiguous), in
// 32 x 32 tiles so that both sides are read and written a cache line at a time, the images' tiles
// shared among `threads` (every element is its own, so the result does not depend on them).
// kToRows: rows[p][c] = cols[c][p]; else cols[c][p] = rows[p][c]. 4-byte elements, any dtype.
template <bool kToRows>
void transpose_maps(uint32_t* rows, uint32_t* cols, int64_t N, int64_t HW, int64_t C, int threads) {
  constexpr int64_t kTile = 32;
  const int64_t tiles_p = (HW + kTile - 1) / kTile, tiles_c = (C + kTile - 1) / kTile, tiles = N * tiles_p * tiles_c;
  threads = tiles * kTile * kTile >= (int64_t(1) << 16) ? threads : 1;
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t n = t / (tiles_p * tiles_c), p0 = (t / tiles_c) % tiles_p * kTile, c0 = t % tiles_c * kTile;
    const int64_t p1 = std::min(HW, p0 + kTile), c1 = std::min(C, c0 + kTile);
    uint32_t* r = rows + n * HW * C;
    uint32_t* k = cols + n * C * HW;
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t c = c0; c < c1; ++c) {
        if (kToRows)
          r[p * C + c] = k[c * HW + p];
        else
          k[c * HW + p] = r[p * C + c];
      }
  }
}
}  // namespace

Tensor nchw_copy(const Tensor& nhwc, int threads) {
  Tensor out = nchw_like(nhwc);
  transpose_maps<false>(static_cast<uint32_t*>(nhwc.raw()), static_cast<uint32_t*>(out.raw()), nhwc.size(0),
                        nhwc.size(1) * nhwc.size(2), nhwc.size(3), threads);
  return out;
}

void nhwc_from(Tensor& nhwc, const Tensor& nchw, int threads) {
  require_four_byte_map("nhwc_from", nhwc);
  require_four_byte_map("nhwc_from", nchw);
  const int64_t N = nhwc.size(0), H = nhwc.size(1), W = nhwc.size(2), C = nhwc.size(3);
  DPX_CHECK(nchw.shape() == Shape({N, C, H, W}) && nchw.dtype() == nhwc.dtype(), "nhwc_from: ",
            shape_str(nchw.shape()), " is not ", shape_str(nhwc.shape()), " in (N, C, H, W) order");
  transpose_maps<true>(static_cast<uint32_t*>(nhwc.raw()), static_cast<uint32_t*>(nchw.raw()), N, H * W, C, threads);
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
Tensor gradient_in(const Tensor& nhwc, ops::DxMode mode, int threads) {
  return mode == ops::DxMode::add ? nchw_copy(nhwc, threads) : nchw_like(nhwc);
}
}  // namespace

void conv2d_forward_via_nchw(ConvForward contiguous, Context& ctx, Tensor& y, const Tensor& x, const Tensor& w,
                             const Tensor* b, const ops::Conv2dParams& p) {
  Tensor yc = nchw_like(y);
  contiguous(ctx, yc, nchw_copy(x, ctx.threads), w, b, contiguous_params(p));
  nhwc_from(y, yc, ctx.threads);
}

void conv2d_backward_via_nchw(ConvBackward contiguous, Context& ctx, Tensor* dx, Tensor* dw, Tensor* db,
                              const Tensor& dy, const Tensor& x, const Tensor& w, const ops::Conv2dParams& p,
                              ops::DxMode dx_mode) {
  Tensor dxc = dx ? gradient_in(*dx, dx_mode, ctx.threads) : Tensor();
  contiguous(ctx, dx ? &dxc : nullptr, dw, db, nchw_copy(dy, ctx.threads), nchw_copy(x, ctx.threads), w,
             contiguous_params(p), dx_mode);
  if (dx) nhwc_from(*dx, dxc, ctx.threads);
}

void max_pool2d_forward_via_nchw(MaxPoolForward contiguous, Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x,
                                 const ops::Pool2dParams& p) {
  Tensor yc = nchw_like(y), ac = nchw_like(argmax);
  contiguous(ctx, yc, ac, nchw_copy(x, ctx.threads), contiguous_params(p));
  nhwc_from(y, yc, ctx.threads);
  nhwc_from(argmax, ac, ctx.threads);
}

void max_pool2d_backward_via_nchw(MaxPoolBackward contiguous, Context& ctx, Tensor& dx, const Tensor& dy,
                                  const Tensor& argmax, const ops::Pool2dParams& p, ops::DxMode dx_mode) {
  Tensor dxc = gradient_in(dx, dx_mode, ctx.threads);
  contiguous(ctx, dxc, nchw_copy(dy, ctx.threads), nchw_copy(argmax, ctx.threads), contiguous_params(p), dx_mode);
  nhwc_from(dx, dxc, ctx.threads);
}

void avg_pool2d_forward_via_nchw(AvgPoolForward contiguous, Context& ctx, Tensor& y, const Tensor& x,
                                 const ops::Pool2dParams& p) {
  Tensor yc = nchw_like(y);
  contiguous(ctx, yc, nchw_copy(x, ctx.threads), contiguous_params(p));
  nhwc_from(y, yc, ctx.threads);
}

void avg_pool2d_backward_via_nchw(AvgPoolBackward contiguous, Context& ctx, Tensor& dx, const Tensor& dy,
                                  const ops::Pool2dParams& p, ops::DxMode dx_mode) {
  Tensor dxc = gradient_in(dx, dx_mode, ctx.threads);
  contiguous(ctx, dxc, nchw_copy(dy, ctx.threads), contiguous_params(p), dx_mode);
  nhwc_from(dx, dxc, ctx.threads);
}

void adaptive_avg_pool2d_forward_via_nchw(AdaptiveForward contiguous, Context& ctx, Tensor& y, const Tensor& x) {
  Tensor yc = nchw_like(y);
  contiguous(ctx, yc, nchw_copy(x, ctx.threads), ops::MemoryFormat::contiguous);
  nhwc_from(y, yc, ctx.threads);
}

void adaptive_avg_pool2d_backward_via_nchw(AdaptiveBackward contiguous, Context& ctx, Tensor& dx, const Tensor& dy,
                                           ops::DxMode dx_mode) {
  Tensor dxc = gradient_in(dx, dx_mode, ctx.threads);
  contiguous(ctx, dxc, nchw_copy(dy, ctx.threads), ops::MemoryFormat::contiguous, dx_mode);
  nhwc_from(dx, dxc, ctx.threads);
}

}  // namespace dpx::kernels
