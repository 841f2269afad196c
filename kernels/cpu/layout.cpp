// CPU layout copies and their backward: permute (up to 6 dimensions), roll over H and W, zero
// padding at the bottom and right of (A, H, W, B) maps, and Swin's window partition and merge. Each output element is written
// by exactly one thread (the maps are one-to-one), so results do not depend on threads.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/layout_plan.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

using ops::plan::PermutePlan;
using ops::plan::permute_plan;

// Calls f(out_offset, in_offset, inner, in_step) for each row of the permuted layout.
template <class F>
void for_each_row(const Context& ctx, const PermutePlan& p, F f) {
  if (p.numel == 0) return;
  const int64_t inner = p.size[p.dims - 1], rows = p.numel / inner;
  const int64_t step = p.in_stride[p.dims - 1];
  int nt = threads_for(ctx, p.numel);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t in_off = 0, i = r;
    for (int k = p.dims - 2; k >= 0; --k) {
      in_off += (i % p.size[k]) * p.in_stride[k];
      i /= p.size[k];
    }
    f(r * inner, in_off, inner, step);
  }
}

struct MapShape {
  int64_t A, H, W, B;
};

MapShape map_shape(const Tensor& t) {
  return {t.size(0), t.size(1), t.size(2), t.size(3)};
}

int64_t wrap(int64_t shift, int64_t n) { return n > 0 ? ((shift % n) + n) % n : 0; }

}  // namespace

void permute(Context& ctx, Tensor& out, const Tensor& in, const std::vector<int>& perm) {
  const char* op = "permute";
  const PermutePlan p = permute_plan(op, "in", in.shape(), "out", out.shape(), perm);
  float* o = out.data<float>();
  const float* x = in.data<float>();
  for_each_row(ctx, p, [&](int64_t oo, int64_t io, int64_t n, int64_t step) {
    for (int64_t i = 0; i < n; ++i) o[oo + i] = x[io + i * step];
  });
}

void permute_backward(Context& ctx, Tensor& din, const Tensor& dout, const std::vector<int>& perm,
                      DxMode dx_mode) {
  const char* op = "permute_backward";
  const PermutePlan p = permute_plan(op, "din", din.shape(), "dout", dout.shape(), perm);
  float* g = din.data<float>();
  const float* d = dout.data<float>();
  if (dx_mode == DxMode::overwrite) {
    for_each_row(ctx, p, [&](int64_t oo, int64_t io, int64_t n, int64_t step) {
      for (int64_t i = 0; i < n; ++i) g[io + i * step] = d[oo + i];
    });
    return;
  }
  for_each_row(ctx, p, [&](int64_t oo, int64_t io, int64_t n, int64_t step) {
    for (int64_t i = 0; i < n; ++i) g[io + i * step] += d[oo + i];
  });
}

// out[a, h, w] = in[a, (h - sh) mod H, (w - sw) mod W]: per row h, two contiguous runs of w.
void roll(Context& ctx, Tensor& out, const Tensor& in, int64_t shift_h, int64_t shift_w) {
  const MapShape s = map_shape(in);
  const int64_t sh = wrap(shift_h, s.H), sw = wrap(shift_w, s.W), row = s.W * s.B;
  const float* x = in.data<float>();
  float* o = out.data<float>();
  int nt = threads_for(ctx, in.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t ah = 0; ah < s.A * s.H; ++ah) {
    const int64_t a = ah / s.H, h = ah % s.H;
    const float* src = x + (a * s.H + (h - sh + s.H) % s.H) * row;
    float* dst = o + ah * row;
    // Columns [0, sw) come from [W - sw, W), columns [sw, W) from [0, W - sw).
    std::copy(src + (s.W - sw) * s.B, src + row, dst);
    std::copy(src, src + (s.W - sw) * s.B, dst + sw * s.B);
  }
}

// din[a, h, w] += dout[a, (h + sh) mod H, (w + sw) mod W].
void roll_backward(Context& ctx, Tensor& din, const Tensor& dout, int64_t shift_h, int64_t shift_w) {
  const MapShape s = map_shape(dout);
  const int64_t sh = wrap(shift_h, s.H), sw = wrap(shift_w, s.W), row = s.W * s.B;
  const float* d = dout.data<float>();
  float* g = din.data<float>();
  int nt = threads_for(ctx, dout.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t ah = 0; ah < s.A * s.H; ++ah) {
    const int64_t a = ah / s.H, h = ah % s.H;
    const float* src = d + (a * s.H + (h + sh) % s.H) * row;
    float* dst = g + ah * row;
    const int64_t head = (s.W - sw) * s.B;  // din columns [0, W - sw) read dout [sw, W)
    for (int64_t i = 0; i < head; ++i) dst[i] += src[sw * s.B + i];
    for (int64_t i = head; i < row; ++i) dst[i] += src[i - head];
  }
}

void pad_hw(Context& ctx, Tensor& out, const Tensor& in) {
  const MapShape s = map_shape(in), t = map_shape(out);
  const float* x = in.data<float>();
  float* o = out.data<float>();
  int nt = threads_for(ctx, out.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t ah = 0; ah < t.A * t.H; ++ah) {
    const int64_t a = ah / t.H, h = ah % t.H;
    float* dst = o + ah * t.W * t.B;
    const int64_t copied = h < s.H ? s.W * s.B : 0;
    if (copied) std::copy(x + (a * s.H + h) * copied, x + (a * s.H + h + 1) * copied, dst);
    std::fill(dst + copied, dst + t.W * t.B, 0.f);
  }
}

void pad_hw_backward(Context& ctx, Tensor& din, const Tensor& dout) {
  const MapShape s = map_shape(din), t = map_shape(dout);
  const float* d = dout.data<float>();
  float* g = din.data<float>();
  const int64_t row = s.W * s.B;
  int nt = threads_for(ctx, din.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t ah = 0; ah < s.A * s.H; ++ah) {
    const int64_t a = ah / s.H, h = ah % s.H;
    const float* src = d + (a * t.H + h) * t.W * t.B;
    float* dst = g + ah * row;
    for (int64_t i = 0; i < row; ++i) dst[i] += src[i];
  }
}

// One window row (b, i, j, u) per iteration: ww pixels of C contiguous floats each.
void window_partition(Context& ctx, Tensor& windows, const Tensor& x, int64_t shift_h, int64_t shift_w) {
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const int64_t nH = windows.size(1), nW = windows.size(2), wh = windows.size(3), ww = windows.size(4);
  const int64_t pH = nH * wh, pW = nW * ww, sh = wrap(shift_h, pH), sw = wrap(shift_w, pW);
  const float* in = x.data<float>();
  float* out = windows.data<float>();
  int nt = threads_for(ctx, windows.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < B * nH * nW * wh; ++r) {
    const int64_t u = r % wh, j = (r / wh) % nW, i = (r / (wh * nW)) % nH, b = r / (wh * nW * nH);
    const int64_t hp = (i * wh + u + sh) % pH;
    float* dst = out + r * ww * C;
    for (int64_t v = 0; v < ww; ++v, dst += C) {
      const int64_t wp = (j * ww + v + sw) % pW;
      if (hp < H && wp < W) {
        const float* src = in + ((b * H + hp) * W + wp) * C;
        std::copy(src, src + C, dst);
      } else {
        std::fill(dst, dst + C, 0.f);
      }
    }
  }
}

// One row (b, h) of y per iteration: W pixels of C contiguous floats, each from its window.
void window_merge(Context& ctx, Tensor& y, const Tensor& windows, int64_t shift_h, int64_t shift_w, DxMode mode) {
  const int64_t B = y.size(0), H = y.size(1), W = y.size(2), C = y.size(3);
  const int64_t nH = windows.size(1), nW = windows.size(2), wh = windows.size(3), ww = windows.size(4);
  const int64_t pH = nH * wh, pW = nW * ww, sh = wrap(shift_h, pH), sw = wrap(shift_w, pW);
  const float* in = windows.data<float>();
  float* out = y.data<float>();
  const bool overwrite = mode == DxMode::overwrite;
  int nt = threads_for(ctx, y.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H, hr = (h - sh + pH) % pH;
    float* dst = out + bh * W * C;
    for (int64_t w = 0; w < W; ++w, dst += C) {
      const int64_t wr = (w - sw + pW) % pW;
      const float* src = in + ((((b * nH + hr / wh) * nW + wr / ww) * wh + hr % wh) * ww + wr % ww) * C;
      if (overwrite)
        std::copy(src, src + C, dst);
      else
        for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace dpx::cpu
