// Reference 2-d convolution, forward and backward: the direct 7-loop convolution over
// (n, c_out, oh, ow, c_in, kh, kw) with groups, stride, padding and dilation.
#include <vector>

#include "kernels/channels_last_host.hpp"
#include "kernels/host_half.hpp"
#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

namespace {

// The sizes of one convolution. x (N, C, H, W), w (K, C / G, KH, KW), y (N, K, OH, OW).
struct ConvSizes {
  int64_t N, C, H, W;  // input
  int64_t K, KH, KW;   // output channels, kernel height and width
  int64_t OH, OW;      // output height and width
  int64_t G, Cg, Kg;   // groups; input and output channels per group
};

ConvSizes sizes(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  ConvSizes s{};
  s.N = x.size(0), s.C = x.size(1), s.H = x.size(2), s.W = x.size(3);
  s.K = w.size(0), s.KH = w.size(2), s.KW = w.size(3);
  s.OH = ops::conv_out_size(s.H, static_cast<int>(s.KH), p.stride_h, p.pad_h, p.dilation_h);
  s.OW = ops::conv_out_size(s.W, static_cast<int>(s.KW), p.stride_w, p.pad_w, p.dilation_w);
  s.G = p.groups, s.Cg = s.C / s.G, s.Kg = s.K / s.G;
  return s;
}

// Calls f(y_index, x_index, w_index) for every multiply-add of the convolution: output
// y[n][k][oh][ow] takes x[n][c][ih][iw] * w[k][ci][i][j] for each input channel ci of k's group
// (c = group * Cg + ci) and each kernel tap (i, j) whose input pixel lies inside the image:
//   ih = oh * stride_h - pad_h + i * dilation_h,   iw = ow * stride_w - pad_w + j * dilation_w.
// Taps that land in the zero padding contribute nothing and are skipped.
template <class F>
void for_each_tap(const ConvSizes& s, const Conv2dParams& p, F f) {
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k) {
      const int64_t group = k / s.Kg;
      for (int64_t oh = 0; oh < s.OH; ++oh)
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t y_index = ((n * s.K + k) * s.OH + oh) * s.OW + ow;
          for (int64_t ci = 0; ci < s.Cg; ++ci) {
            const int64_t c = group * s.Cg + ci;
            for (int64_t i = 0; i < s.KH; ++i)
              for (int64_t j = 0; j < s.KW; ++j) {
                const int64_t ih = oh * p.stride_h - p.pad_h + i * p.dilation_h;
                const int64_t iw = ow * p.stride_w - p.pad_w + j * p.dilation_w;
                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;  // padding
                const int64_t x_index = ((n * s.C + c) * s.H + ih) * s.W + iw;
                const int64_t w_index = ((k * s.Cg + ci) * s.KH + i) * s.KW + j;
                f(y_index, x_index, w_index);
              }
          }
        }
    }
}

// dst[i] += acc[i], rounding each double sum once to f32.
void add_into(Tensor& dst, const std::vector<double>& acc, DxMode mode = DxMode::add) {
  float* d = dst.data<float>();
  for (size_t i = 0; i < acc.size(); ++i)
    d[i] = mode == DxMode::overwrite ? static_cast<float>(acc[i]) : d[i] + static_cast<float>(acc[i]);
}

}  // namespace

// y[n][k][oh][ow] = b[k] + sum over (ci, i, j) of x[n][c][ih][iw] * w[k][ci][i][j], then
// max(y, 0) with Epilogue::relu (NaN passes, as relu_forward).
void conv2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b,
                    const Conv2dParams& p) {
  if (kernels::is_half(y) || kernels::is_half(x))
    return kernels::conv2d_forward_widened(conv2d_forward, ctx, y, x, w, b, p);
  if (p.format == MemoryFormat::channels_last)
    return kernels::conv2d_forward_via_nchw(conv2d_forward, ctx, y, x, w, b, p);
  const ConvSizes s = sizes(x, w, p);
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const float* bp = b && b->defined() ? b->data<float>() : nullptr;
  std::vector<double> acc(static_cast<size_t>(y.numel()), 0.0);
  for_each_tap(s, p, [&](int64_t yi, int64_t xi, int64_t wi) {
    acc[yi] += static_cast<double>(xp[xi]) * wp[wi];
  });
  float* yp = y.data<float>();
  for (int64_t yi = 0; yi < y.numel(); ++yi) {
    const int64_t k = yi / (s.OH * s.OW) % s.K;  // output channel of element yi
    const float v = static_cast<float>(acc[yi] + (bp ? bp[k] : 0.0));
    yp[yi] = p.epilogue == Epilogue::relu && v < 0.f ? 0.f : v;
  }
}

// Each multiply-add y += x * w of the forward sends dy back along both factors:
//   dx[x_index] += dy[y_index] * w[w_index],   dw[w_index] += dy[y_index] * x[x_index];
// and db[k] += dy summed over (n, oh, ow).
void conv2d_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                     const Tensor& x, const Tensor& w, const Conv2dParams& p, DxMode dx_mode) {
  if (kernels::is_half(dy) || kernels::is_half(x) || kernels::is_half(dx))
    return kernels::conv2d_backward_widened(conv2d_backward, ctx, dx, dw, db, dy, x, w, p, dx_mode);
  if (p.format == MemoryFormat::channels_last)
    return kernels::conv2d_backward_via_nchw(conv2d_backward, ctx, dx, dw, db, dy, x, w, p, dx_mode);
  const ConvSizes s = sizes(x, w, p);
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const float* dyp = dy.data<float>();
  std::vector<double> dx_acc(dx ? static_cast<size_t>(x.numel()) : 0, 0.0);
  std::vector<double> dw_acc(dw ? static_cast<size_t>(w.numel()) : 0, 0.0);
  if (dx || dw)
    for_each_tap(s, p, [&](int64_t yi, int64_t xi, int64_t wi) {
      if (dx) dx_acc[xi] += static_cast<double>(dyp[yi]) * wp[wi];
      if (dw) dw_acc[wi] += static_cast<double>(dyp[yi]) * xp[xi];
    });
  if (dx) add_into(*dx, dx_acc, dx_mode);
  if (dw) add_into(*dw, dw_acc);
  if (db) {
    std::vector<double> db_acc(static_cast<size_t>(s.K), 0.0);
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t k = 0; k < s.K; ++k)
        for (int64_t o = 0; o < s.OH * s.OW; ++o) db_acc[k] += dyp[(n * s.K + k) * s.OH * s.OW + o];
    add_into(*db, db_acc);
  }
}

}  // namespace dpx::ref
