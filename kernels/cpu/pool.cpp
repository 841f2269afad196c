// CPU pooling, forward and backward: max (with arg-max indices), average (PyTorch's padding,
// ceil_mode and count_include_pad rules) and adaptive average (PyTorch's bins). Every (n, c)
// plane is independent, so planes are shared over threads without changing any result.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/channels_last_host.hpp"
#include "kernels/host_half.hpp"
#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

struct PoolShape {
  int64_t planes, H, W, OH, OW;
};

// The output size of pooling x (a window the op layer has checked against PyTorch's rules).
PoolShape pool_shape(const Tensor& x, const Pool2dParams& p) {
  PoolShape s{x.size(0) * x.size(1), x.size(2), x.size(3), 0, 0};
  s.OH = ops::conv_out_size(s.H, p.kernel_h, p.stride_h, p.pad_h, 1, p.ceil_mode);
  s.OW = ops::conv_out_size(s.W, p.kernel_w, p.stride_w, p.pad_w, 1, p.ceil_mode);
  return s;
}

// Window [start, end) of output o along one dimension, clipped to the input [0, L); `padded`
// is its extent clipped to the padded input instead (PyTorch's divisor with padding).
struct Window {
  int64_t start, end, padded;
};
Window window(int64_t o, int kernel, int stride, int pad, int64_t L) {
  int64_t start = o * stride - pad, end = std::min<int64_t>(start + kernel, L + pad);
  Window w{start, end, end - start};
  w.start = std::max<int64_t>(w.start, 0);
  w.end = std::min<int64_t>(w.end, L);
  return w;
}

// Adaptive bin i of O over L: [floor(i L / O), ceil((i + 1) L / O)).
Window bin(int64_t i, int64_t O, int64_t L) {
  int64_t start = i * L / O, end = ((i + 1) * L + O - 1) / O;
  return {start, end, end - start};
}

}  // namespace

void max_pool2d_forward(Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x,
                        const Pool2dParams& p) {
  if (kernels::is_half(x) || kernels::is_half(y))
    return kernels::max_pool2d_forward_widened(max_pool2d_forward, ctx, y, argmax, x, p);
  if (p.format == MemoryFormat::channels_last)
    return kernels::max_pool2d_forward_via_nchw(max_pool2d_forward, ctx, y, argmax, x, p);
  const PoolShape s = pool_shape(x, p);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  int32_t* ap = argmax.data<int32_t>();
  int nt = threads_for(ctx, s.planes * s.OH * s.OW * p.kernel_h * p.kernel_w);
  const int64_t kw = p.kernel_w, sw = p.stride_w, pw = p.pad_w, W = s.W, OW = s.OW;
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t pl = 0; pl < s.planes; ++pl) {
    const float* in = xp + pl * s.H * W;
    float* out = yp + pl * s.OH * OW;
    int32_t* idx = ap + pl * s.OH * OW;
    for (int64_t oh = 0; oh < s.OH; ++oh) {
      const Window wh = window(oh, p.kernel_h, p.stride_h, p.pad_h, s.H);
      // Outputs [lo, hi) whose windows lie inside the row: the window's taps one after another,
      // each over all of them in a branch-free loop the compiler vectorises (each output sees
      // the same comparisons in the same order as in the loop below). A loop over the outputs
      // around one over the taps stayed scalar and branchy: 0.7 GB/s, 34 ms for SqueezeNet's
      // first pool at batch 16 (bench_kernels BM_MaxPoolForward).
      const int64_t lo = std::min<int64_t>(OW, (pw + sw - 1) / sw);
      const int64_t last_start = W + pw - kw;  // the last window's start + pad
      const int64_t hi = last_start < 0 ? lo : std::max(lo, std::min<int64_t>(OW, last_start / sw + 1));
      float* row_out = out + oh * OW;
      int32_t* row_idx = idx + oh * OW;
      for (int64_t ow = lo; ow < hi; ++ow) {
        row_out[ow] = -std::numeric_limits<float>::infinity();
        row_idx[ow] = static_cast<int32_t>(wh.start * W + ow * sw - pw);
      }
      for (int64_t ih = wh.start; ih < wh.end; ++ih)
        for (int64_t j = 0; j < kw; ++j) {
          const int64_t tap = ih * W + j - pw;  // in[tap + ow * sw]: output ow's element
          const int32_t at = static_cast<int32_t>(tap), step = static_cast<int32_t>(sw);
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) {
            const float v = in[tap + ow * sw], best = row_out[ow];
            const bool take = (v > best) | (v != v);  // `|`, not `||`: no branch
            row_out[ow] = take ? v : best;
            row_idx[ow] = take ? at + static_cast<int32_t>(ow) * step : row_idx[ow];
          }
        }
      for (int64_t ow = 0; ow < OW; ++ow) {
        if (ow == lo) ow = hi;  // done above
        if (ow >= OW) break;
        const Window ww = window(ow, p.kernel_w, p.stride_w, p.pad_w, W);
        float best = -std::numeric_limits<float>::infinity();
        int64_t best_i = wh.start * W + ww.start;
        // Strictly greater: the first maximum in row-major order wins; NaN propagates (PyTorch).
        for (int64_t ih = wh.start; ih < wh.end; ++ih)
          for (int64_t iw = ww.start; iw < ww.end; ++iw) {
            const float v = in[ih * W + iw];
            if (v > best || std::isnan(v)) {
              best = v;
              best_i = ih * W + iw;
            }
          }
        row_out[ow] = best;
        row_idx[ow] = static_cast<int32_t>(best_i);
      }
    }
  }
}

void max_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& argmax, const Pool2dParams& p,
                         DxMode dx_mode) {
  if (kernels::is_half(dy) || kernels::is_half(dx))
    return kernels::max_pool2d_backward_widened(max_pool2d_backward, ctx, dx, dy, argmax, p, dx_mode);
  if (p.format == MemoryFormat::channels_last)
    return kernels::max_pool2d_backward_via_nchw(max_pool2d_backward, ctx, dx, dy, argmax, p, dx_mode);
  const char* op = "max_pool2d_backward";
  const int64_t planes = dy.size(0) * dy.size(1), HW = dx.size(2) * dx.size(3);
  const int64_t OHW = dy.size(2) * dy.size(3);
  const int32_t* ap = argmax.data<int32_t>();
  // A wrong index would write outside its plane: check them all before touching dx.
  for (int64_t i = 0; i < argmax.numel(); ++i)
    if (ap[i] < 0 || ap[i] >= HW)
      fail(op, ": argmax ", ap[i], " at element ", i, " is outside a ", dx.size(2), "x", dx.size(3),
           " plane; pass the argmax written by max_pool2d_forward for this dx");
  float* dxp = dx.data<float>();
  const float* dyp = dy.data<float>();
  int nt = threads_for(ctx, planes * (OHW + HW));
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t pl = 0; pl < planes; ++pl) {
    float* d = dxp + pl * HW;
    if (dx_mode == DxMode::overwrite) std::fill(d, d + HW, 0.f);  // the plane, while in cache
    for (int64_t o = 0; o < OHW; ++o) d[ap[pl * OHW + o]] += dyp[pl * OHW + o];
  }
}

void avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Pool2dParams& p) {
  if (p.format == MemoryFormat::channels_last)
    return kernels::avg_pool2d_forward_via_nchw(avg_pool2d_forward, ctx, y, x, p);
  const PoolShape s = pool_shape(x, p);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  int nt = threads_for(ctx, s.planes * s.OH * s.OW * p.kernel_h * p.kernel_w);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t pl = 0; pl < s.planes; ++pl) {
    const float* in = xp + pl * s.H * s.W;
    float* out = yp + pl * s.OH * s.OW;
    for (int64_t oh = 0; oh < s.OH; ++oh) {
      const Window wh = window(oh, p.kernel_h, p.stride_h, p.pad_h, s.H);
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        const Window ww = window(ow, p.kernel_w, p.stride_w, p.pad_w, s.W);
        const int64_t divisor =
            p.count_include_pad ? wh.padded * ww.padded : (wh.end - wh.start) * (ww.end - ww.start);
        float sum = 0.f;
        for (int64_t ih = wh.start; ih < wh.end; ++ih)
          for (int64_t iw = ww.start; iw < ww.end; ++iw) sum += in[ih * s.W + iw];
        out[oh * s.OW + ow] = sum / static_cast<float>(divisor);
      }
    }
  }
}

void avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Pool2dParams& p, DxMode dx_mode) {
  if (p.format == MemoryFormat::channels_last)
    return kernels::avg_pool2d_backward_via_nchw(avg_pool2d_backward, ctx, dx, dy, p, dx_mode);
  const PoolShape s = pool_shape(dx, p);
  float* dxp = dx.data<float>();
  const float* dyp = dy.data<float>();
  int nt = threads_for(ctx, s.planes * s.OH * s.OW * p.kernel_h * p.kernel_w);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t pl = 0; pl < s.planes; ++pl) {
    float* d = dxp + pl * s.H * s.W;
    const float* g = dyp + pl * s.OH * s.OW;
    if (dx_mode == DxMode::overwrite) std::fill(d, d + s.H * s.W, 0.f);  // the plane, while in cache
    for (int64_t oh = 0; oh < s.OH; ++oh) {
      const Window wh = window(oh, p.kernel_h, p.stride_h, p.pad_h, s.H);
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        const Window ww = window(ow, p.kernel_w, p.stride_w, p.pad_w, s.W);
        const int64_t divisor =
            p.count_include_pad ? wh.padded * ww.padded : (wh.end - wh.start) * (ww.end - ww.start);
        const float v = g[oh * s.OW + ow] / static_cast<float>(divisor);
        for (int64_t ih = wh.start; ih < wh.end; ++ih)
          for (int64_t iw = ww.start; iw < ww.end; ++iw) d[ih * s.W + iw] += v;
      }
    }
  }
}

void adaptive_avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x, MemoryFormat format) {
  if (format == MemoryFormat::channels_last)
    return kernels::adaptive_avg_pool2d_forward_via_nchw(adaptive_avg_pool2d_forward, ctx, y, x);
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = y.size(2), OW = y.size(3);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  int nt = threads_for(ctx, planes * std::max(H * W, OH * OW));
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float* in = xp + pl * H * W;
    float* out = yp + pl * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const Window bh = bin(oh, OH, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Window bw = bin(ow, OW, W);
        // In double: a global pool sums whole maps (12,544 values in EfficientNet's first
        // squeeze-excitation), where a float running sum loses digits torch's pairwise sum keeps.
        LaneSum sum;
        for (int64_t ih = bh.start; ih < bh.end; ++ih) {
          const float* row = in + ih * W + bw.start;
          sum.add(bw.end - bw.start, [row](int64_t i) { return static_cast<double>(row[i]); });
        }
        const int64_t area = bh.padded * bw.padded;
        out[oh * OW + ow] = area > 0 ? static_cast<float>(sum.total() / static_cast<double>(area)) : 0.f;
      }
    }
  }
}

void adaptive_avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, MemoryFormat format, DxMode dx_mode) {
  if (format == MemoryFormat::channels_last)
    return kernels::adaptive_avg_pool2d_backward_via_nchw(adaptive_avg_pool2d_backward, ctx, dx, dy, dx_mode);
  const int64_t planes = dx.size(0) * dx.size(1), H = dx.size(2), W = dx.size(3);
  const int64_t OH = dy.size(2), OW = dy.size(3);
  float* dxp = dx.data<float>();
  const float* dyp = dy.data<float>();
  int nt = threads_for(ctx, planes * std::max(H * W, OH * OW));
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t pl = 0; pl < planes; ++pl) {
    float* d = dxp + pl * H * W;
    const float* g = dyp + pl * OH * OW;
    if (dx_mode == DxMode::overwrite && OH == 1 && OW == 1) {
      // A global pool written over: one value for the whole plane (0 + v, as added into zeros).
      std::fill(d, d + H * W, 0.f + g[0] / static_cast<float>(H * W));
      continue;
    }
    if (dx_mode == DxMode::overwrite) std::fill(d, d + H * W, 0.f);  // the plane, while in cache
    for (int64_t oh = 0; oh < OH; ++oh) {
      const Window bh = bin(oh, OH, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Window bw = bin(ow, OW, W);
        const int64_t area = bh.padded * bw.padded;
        if (area == 0) continue;
        const float v = g[oh * OW + ow] / static_cast<float>(area);
        for (int64_t ih = bh.start; ih < bh.end; ++ih)
          for (int64_t iw = bw.start; iw < bw.end; ++iw) d[ih * W + iw] += v;
      }
    }
  }
}

}  // namespace dpx::cpu
