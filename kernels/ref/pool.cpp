// Reference 2-d pooling, forward and backward: max (with the flat h*W+w arg-max index),
// average (padding, ceil_mode, count_include_pad as PyTorch) and adaptive average.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/channels_last_host.hpp"
#include "kernels/host_half.hpp"
#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

namespace {

// The input rows (or columns) [start, end) that output o's window covers, for a window of
// `kernel` taps placed every `stride` with `pad` zeros before the input of length L.
// `padded` is the window's length counting padding but not what lies beyond the right-hand
// padding (a ceil_mode window may stick out): PyTorch's divisor with count_include_pad.
struct Window {
  int64_t start, end, padded;
};

Window window(int64_t o, int kernel, int stride, int pad, int64_t L) {
  const int64_t first = o * stride - pad;                            // may be negative (padding)
  const int64_t last = std::min<int64_t>(first + kernel, L + pad);  // one past, inside the padding
  return {std::max<int64_t>(first, 0), std::min<int64_t>(last, L), last - first};
}

// Adaptive bin i of O bins over length L: [floor(i L / O), ceil((i + 1) L / O)).
Window adaptive_bin(int64_t i, int64_t O, int64_t L) {
  const int64_t start = i * L / O, end = ((i + 1) * L + O - 1) / O;
  return {start, end, end - start};
}

}  // namespace

// y[n][c][oh][ow] = the largest x in the window; argmax = its flat index ih * W + iw within
// the (n, c) plane. The first maximum in row-major order wins (strictly greater), and a NaN
// wins over any number (PyTorch propagates NaN).
void max_pool2d_forward(Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x, const Pool2dParams& p) {
  if (kernels::is_half(x) || kernels::is_half(y))
    return kernels::max_pool2d_forward_widened(max_pool2d_forward, ctx, y, argmax, x, p);
  if (p.format == MemoryFormat::channels_last)
    return kernels::max_pool2d_forward_via_nchw(max_pool2d_forward, ctx, y, argmax, x, p);
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = y.size(2), OW = y.size(3);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  int32_t* ap = argmax.data<int32_t>();
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Window wh = window(oh, p.kernel_h, p.stride_h, p.pad_h, H);
        const Window ww = window(ow, p.kernel_w, p.stride_w, p.pad_w, W);
        float best = -std::numeric_limits<float>::infinity();
        int64_t best_index = wh.start * W + ww.start;  // if every value is -inf
        for (int64_t ih = wh.start; ih < wh.end; ++ih)
          for (int64_t iw = ww.start; iw < ww.end; ++iw) {
            const float v = xp[pl * H * W + ih * W + iw];
            if (v > best || std::isnan(v)) {
              best = v;
              best_index = ih * W + iw;
            }
          }
        yp[(pl * OH + oh) * OW + ow] = best;
        ap[(pl * OH + oh) * OW + ow] = static_cast<int32_t>(best_index);
      }
}

// Each output's gradient goes to the input element that was its maximum (the window parameters
// are not needed to scatter); written over, dx starts from zeros.
void max_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& argmax, const Pool2dParams& p,
                         DxMode dx_mode) {
  if (kernels::is_half(dy) || kernels::is_half(dx))
    return kernels::max_pool2d_backward_widened(max_pool2d_backward, ctx, dx, dy, argmax, p, dx_mode);
  if (p.format == MemoryFormat::channels_last)
    return kernels::max_pool2d_backward_via_nchw(max_pool2d_backward, ctx, dx, dy, argmax, p, dx_mode);
  const int64_t planes = dy.size(0) * dy.size(1), HW = dx.size(2) * dx.size(3);
  const int64_t OHW = dy.size(2) * dy.size(3);
  float* dxp = dx.data<float>();
  if (dx_mode == DxMode::overwrite) std::fill(dxp, dxp + dx.numel(), 0.f);
  const float* dyp = dy.data<float>();
  const int32_t* ap = argmax.data<int32_t>();
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t o = 0; o < OHW; ++o) dxp[pl * HW + ap[pl * OHW + o]] += dyp[pl * OHW + o];
}

namespace {
// The divisor of an average window: its area including the zero padding, or only the part
// inside the input.
int64_t divisor(const Window& wh, const Window& ww, bool count_include_pad) {
  return count_include_pad ? wh.padded * ww.padded : (wh.end - wh.start) * (ww.end - ww.start);
}
}  // namespace

// y = (sum of x in the window) / divisor.
void avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Pool2dParams& p) {
  if (p.format == MemoryFormat::channels_last)
    return kernels::avg_pool2d_forward_via_nchw(avg_pool2d_forward, ctx, y, x, p);
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = y.size(2), OW = y.size(3);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Window wh = window(oh, p.kernel_h, p.stride_h, p.pad_h, H);
        const Window ww = window(ow, p.kernel_w, p.stride_w, p.pad_w, W);
        double sum = 0;
        for (int64_t ih = wh.start; ih < wh.end; ++ih)
          for (int64_t iw = ww.start; iw < ww.end; ++iw) sum += xp[pl * H * W + ih * W + iw];
        yp[(pl * OH + oh) * OW + ow] = static_cast<float>(sum / divisor(wh, ww, p.count_include_pad));
      }
}

// Every input in a window gets dy / divisor of that window (windows may overlap: they add up).
void avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Pool2dParams& p, DxMode dx_mode) {
  if (p.format == MemoryFormat::channels_last)
    return kernels::avg_pool2d_backward_via_nchw(avg_pool2d_backward, ctx, dx, dy, p, dx_mode);
  const int64_t planes = dx.size(0) * dx.size(1), H = dx.size(2), W = dx.size(3);
  const int64_t OH = dy.size(2), OW = dy.size(3);
  const float* dyp = dy.data<float>();
  std::vector<double> acc(static_cast<size_t>(dx.numel()), 0.0);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Window wh = window(oh, p.kernel_h, p.stride_h, p.pad_h, H);
        const Window ww = window(ow, p.kernel_w, p.stride_w, p.pad_w, W);
        const double g = dyp[(pl * OH + oh) * OW + ow] / static_cast<double>(divisor(wh, ww, p.count_include_pad));
        for (int64_t ih = wh.start; ih < wh.end; ++ih)
          for (int64_t iw = ww.start; iw < ww.end; ++iw) acc[pl * H * W + ih * W + iw] += g;
      }
  float* dxp = dx.data<float>();
  for (int64_t i = 0; i < dx.numel(); ++i)
    dxp[i] = (dx_mode == DxMode::overwrite ? 0.f : dxp[i]) + static_cast<float>(acc[i]);
}

// y (N, C, OH, OW): the mean of x over each adaptive bin (bins may overlap when OH > H or the
// sizes do not divide).
void adaptive_avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x, MemoryFormat format) {
  if (format == MemoryFormat::channels_last)
    return kernels::adaptive_avg_pool2d_forward_via_nchw(adaptive_avg_pool2d_forward, ctx, y, x);
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = y.size(2), OW = y.size(3);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Window bh = adaptive_bin(oh, OH, H), bw = adaptive_bin(ow, OW, W);
        double sum = 0;
        for (int64_t ih = bh.start; ih < bh.end; ++ih)
          for (int64_t iw = bw.start; iw < bw.end; ++iw) sum += xp[pl * H * W + ih * W + iw];
        const int64_t area = bh.padded * bw.padded;
        yp[(pl * OH + oh) * OW + ow] = area > 0 ? static_cast<float>(sum / area) : 0.f;
      }
}

// Every input in a bin gets dy / (the bin's area).
void adaptive_avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, MemoryFormat format, DxMode dx_mode) {
  if (format == MemoryFormat::channels_last)
    return kernels::adaptive_avg_pool2d_backward_via_nchw(adaptive_avg_pool2d_backward, ctx, dx, dy, dx_mode);
  const int64_t planes = dx.size(0) * dx.size(1), H = dx.size(2), W = dx.size(3);
  const int64_t OH = dy.size(2), OW = dy.size(3);
  const float* dyp = dy.data<float>();
  std::vector<double> acc(static_cast<size_t>(dx.numel()), 0.0);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Window bh = adaptive_bin(oh, OH, H), bw = adaptive_bin(ow, OW, W);
        const int64_t area = bh.padded * bw.padded;
        if (area == 0) continue;
        const double g = dyp[(pl * OH + oh) * OW + ow] / static_cast<double>(area);
        for (int64_t ih = bh.start; ih < bh.end; ++ih)
          for (int64_t iw = bw.start; iw < bw.end; ++iw) acc[pl * H * W + ih * W + iw] += g;
      }
  float* dxp = dx.data<float>();
  for (int64_t i = 0; i < dx.numel(); ++i)
    dxp[i] = (dx_mode == DxMode::overwrite ? 0.f : dxp[i]) + static_cast<float>(acc[i]);
}

}  // namespace dpx::ref
