// CPU conv2d forward/backward: im2col + one single-threaded GEMM (detail::gemm_one: oneDNN's
// sgemm, or Eigen's without oneDNN) per (image, group, tile of output pixels);
// 1x1 stride-1 unpadded convolutions use x itself as the column matrix. Small images (under 64
// output pixels) go side by side into one column matrix (several images per GEMM), so that planes
// (ResNet's 2x2 and 4x4 at 64x64 inputs) make one product with a long inner dimension instead of
// one thin product per image that reads the whole weight matrix and, for dW, reads and writes
// all of dW. Depthwise convolutions (one input channel per group, groups > 1, any stride,
// padding, dilation and channel multiplier) go to the direct kernel of depthwise_conv.cpp
// instead: as GEMMs they would be N * C tiny products (one weight row each). Work units depend
// on the shapes only and dW partials are summed in a fixed order, so results never depend on
// threads.
#include <omp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/conv2d_algos.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/depthwise_conv.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

// A column tile (Kdim x tile floats) of about 512 KB stays in L2 while the GEMM packs it.
constexpr int64_t kColTileFloats = int64_t{1} << 17;
constexpr int64_t kMinTile = 64;
// dW partial buffers may take this much memory; fewer slots (each summing several images in
// order) when dW is large.
constexpr int64_t kPartialBudgetBytes = int64_t{64} << 20;
// Output-channel rows per work unit (dW, and the forward of batched images), so that one large
// group still splits over threads.
constexpr int64_t kRowBlock = 128;
// Input channels per work unit in dx of batched images, so that a single chunk of images still
// splits over threads (their dx rows are apart).
constexpr int64_t kChanBlock = 64;
// dW elements per block when the partials are summed.
constexpr int64_t kSumBlock = 256;

struct ConvShape {
  int64_t N, C, H, W, K, kh, kw, OH, OW;  // K: output channels
  int64_t G, Cg, Kg, Kdim, HW, P;         // per group: Cg inputs, Kg outputs; P = OH * OW
  int sh, sw, ph, pw, dh, dw;
  bool direct;          // 1x1, stride 1, no padding: x is the column matrix
  int64_t tile, tiles;  // output pixels per column tile, and their number
  // Images per column matrix: 1, or several whole small images side by side, each P columns;
  // then `chunks` column matrices cover the batch.
  int64_t batch, chunks;
};

// The sizes and the tiling of a convolution whose arguments the op layer has checked.
ConvShape conv_shape(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  ConvShape s{};
  s.N = x.size(0), s.C = x.size(1), s.H = x.size(2), s.W = x.size(3);
  s.K = w.size(0), s.kh = w.size(2), s.kw = w.size(3), s.G = p.groups;
  s.sh = p.stride_h, s.sw = p.stride_w, s.ph = p.pad_h, s.pw = p.pad_w;
  s.dh = p.dilation_h, s.dw = p.dilation_w;
  s.OH = ops::conv_out_size(s.H, static_cast<int>(s.kh), s.sh, s.ph, s.dh);
  s.OW = ops::conv_out_size(s.W, static_cast<int>(s.kw), s.sw, s.pw, s.dw);
  s.Cg = s.C / s.G, s.Kg = s.K / s.G, s.Kdim = s.Cg * s.kh * s.kw;
  s.HW = s.H * s.W, s.P = s.OH * s.OW;
  s.direct = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0;
  const int64_t width = std::max(kMinTile, kColTileFloats / std::max<int64_t>(s.Kdim, 1) / 16 * 16);
  s.tile = std::min(s.P, width);
  s.tiles = (s.P + s.tile - 1) / s.tile;
  // Only images of fewer than kMinTile pixels: from there on a product per image is wide enough,
  // and x itself, without copies, is the column matrix of a 1x1 convolution.
  s.batch = s.P < kMinTile ? std::clamp<int64_t>(width / s.P, 1, std::max<int64_t>(s.N, 1)) : 1;
  s.chunks = (s.N + s.batch - 1) / s.batch;
  // As many images in every chunk as can be (8 images at most 7 a chunk: 4 + 4, not 7 + 1).
  if (s.chunks > 0) s.batch = (s.N + s.chunks - 1) / s.chunks;
  return s;
}

// Walks the column matrix of output pixels [p0, p0 + len) of one image and group: for each row
// r = (c, i, j) and each run of pixels [ow, ow_end) on one output row, calls
// fn(d, ow, ow_end, row, a, b, iw0): d is where the run starts in the tile (row r starts at
// r * len), `row` the input row it reads (null inside vertical padding), [a, b) the output
// columns whose input column o * stride_w + iw0 is inside the image. im2col and col2im share
// this walk, so they agree on every index.
template <typename T, typename Fn>
void for_each_run(const ConvShape& s, T* xg, int64_t p0, int64_t len, Fn&& fn) {
  const int64_t end = p0 + len;
  for (int64_t c = 0; c < s.Cg; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        const int64_t r = (c * s.kh + i) * s.kw + j;
        const int64_t iw0 = j * s.dw - s.pw;
        int64_t ow_lo, ow_hi;
        valid_range(s.W, s.OW, s.sw, iw0, ow_lo, ow_hi);
        T* plane = xg + c * s.HW;
        int64_t d = r * len;
        for (int64_t p = p0; p < end;) {
          const int64_t oh = p / s.OW, ow = p - oh * s.OW, ow_end = std::min(s.OW, ow + (end - p));
          const int64_t ih = oh * s.sh - s.ph + i * s.dh;
          fn(d, ow, ow_end, ih >= 0 && ih < s.H ? plane + ih * s.W : nullptr,
             std::clamp(ow_lo, ow, ow_end), std::clamp(ow_hi, ow, ow_end), iw0);
          d += ow_end - ow;
          p += ow_end - ow;
        }
      }
}

// col (Kdim, len) = the input patches of output pixels [p0, p0 + len) of one image and group.
void im2col_tile(const ConvShape& s, const float* xg, int64_t p0, int64_t len, float* col) {
  const int64_t sw = s.sw;
  for_each_run(s, xg, p0, len,
               [&](int64_t d, int64_t ow, int64_t ow_end, const float* row, int64_t a, int64_t b,
                   int64_t iw0) {
                 float* out = col + d;  // out[o - ow] holds output column o
                 if (!row) {
                   std::fill(out, out + (ow_end - ow), 0.f);
                   return;
                 }
                 std::fill(out, out + (a - ow), 0.f);
                 for (int64_t o = a; o < b; ++o) out[o - ow] = row[o * sw + iw0];
                 std::fill(out + (b - ow), out + (ow_end - ow), 0.f);
               });
}

// dxg += the column gradients dcol (Kdim, len) scattered back onto the input, in a fixed order.
void col2im_tile(const ConvShape& s, const float* dcol, int64_t p0, int64_t len, float* dxg) {
  const int64_t sw = s.sw;
  for_each_run(s, dxg, p0, len,
               [&](int64_t d, int64_t ow, int64_t, float* row, int64_t a, int64_t b, int64_t iw0) {
                 if (!row) return;
                 const float* in = dcol + d;
                 for (int64_t o = a; o < b; ++o) row[o * sw + iw0] += in[o - ow];
               });
}

// Small images (batch > 1) walk their patches through a table instead: at[t * P + p] is where
// kernel tap t = (i, j) of output pixel p reads in an input plane, or -1 in the padding. Runs on
// 2x2 or 4x4 planes are a few floats long, too short for for_each_run's per-run work.
std::vector<int32_t> patch_index(const ConvShape& s) {
  std::vector<int32_t> at(static_cast<size_t>(s.kh * s.kw * s.P));
  for (int64_t i = 0; i < s.kh; ++i)
    for (int64_t j = 0; j < s.kw; ++j)
      for (int64_t oh = 0; oh < s.OH; ++oh)
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t ih = oh * s.sh - s.ph + i * s.dh, iw = ow * s.sw - s.pw + j * s.dw;
          const bool inside = ih >= 0 && ih < s.H && iw >= 0 && iw < s.W;
          at[((i * s.kw + j) * s.OH + oh) * s.OW + ow] =
              inside ? static_cast<int32_t>(ih * s.W + iw) : -1;
        }
  return at;
}

// col (Kdim, nb * P) = the patches of images n0 ... n0 + nb - 1 of group g, side by side.
void im2col_images(const ConvShape& s, const int32_t* at, const float* x, int64_t g, int64_t n0,
                   int64_t nb, float* col) {
  const int64_t taps = s.kh * s.kw, ld = nb * s.P;
  for (int64_t j = 0; j < nb; ++j)
    for (int64_t c = 0; c < s.Cg; ++c) {
      const float* plane = x + ((n0 + j) * s.C + g * s.Cg + c) * s.HW;
      for (int64_t t = 0; t < taps; ++t) {
        float* dst = col + (c * taps + t) * ld + j * s.P;
        const int32_t* a = at + t * s.P;
        for (int64_t p = 0; p < s.P; ++p) dst[p] = a[p] >= 0 ? plane[a[p]] : 0.f;
      }
    }
}

// dx of channels c0 ... c0 + cn - 1 of group g of images n0 ... n0 + nb - 1 += their column
// gradients dcol (cn * kh * kw, nb * P), in the order of col2im_tile.
void col2im_images(const ConvShape& s, const int32_t* at, const float* dcol, int64_t g,
                   int64_t c0, int64_t cn, int64_t n0, int64_t nb, float* dx) {
  const int64_t taps = s.kh * s.kw, ld = nb * s.P;
  for (int64_t j = 0; j < nb; ++j)
    for (int64_t c = 0; c < cn; ++c) {
      float* plane = dx + ((n0 + j) * s.C + g * s.Cg + c0 + c) * s.HW;
      for (int64_t t = 0; t < taps; ++t) {
        const float* src = dcol + (c * taps + t) * ld + j * s.P;
        const int32_t* a = at + t * s.P;
        for (int64_t p = 0; p < s.P; ++p)
          if (a[p] >= 0) plane[a[p]] += src[p];
      }
    }
}

// rows (r, nb * P) = rows [k0, k0 + r) of channel planes (P floats) of images n0 ... n0 + nb - 1,
// side by side; t (N, K, P) is y or dy. to_images does the reverse, adding bias[k] when given.
void gather_images(const ConvShape& s, const float* t, int64_t k0, int64_t r, int64_t n0,
                   int64_t nb, float* rows) {
  for (int64_t k = 0; k < r; ++k)
    for (int64_t j = 0; j < nb; ++j)
      std::copy_n(t + ((n0 + j) * s.K + k0 + k) * s.P, s.P, rows + (k * nb + j) * s.P);
}
void to_images(const ConvShape& s, const float* rows, int64_t k0, int64_t r, int64_t n0,
               int64_t nb, const float* bias, bool relu, float* t) {
  for (int64_t k = 0; k < r; ++k)
    for (int64_t j = 0; j < nb; ++j) {
      const float* src = rows + (k * nb + j) * s.P;
      float* dst = t + ((n0 + j) * s.K + k0 + k) * s.P;
      const float add = bias ? bias[k0 + k] : 0.f;
      if (relu)
        for (int64_t i = 0; i < s.P; ++i) dst[i] = relu_of(src[i] + add);
      else
        for (int64_t i = 0; i < s.P; ++i) dst[i] = src[i] + add;
    }
}

int64_t conv_macs(const ConvShape& s) { return s.N * s.K * s.P * s.Kdim; }

// One input channel per group: the direct depthwise kernel. A single group (C_in == 1) is an
// ordinary convolution and stays a GEMM, which suits many output channels better.
bool is_depthwise(const ConvShape& s) { return s.Cg == 1 && s.G > 1; }

DepthwiseShape depthwise_shape(const ConvShape& s) {
  return {s.N, s.C, s.Kg, s.H, s.W, s.kh, s.kw, s.OH, s.OW, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw};
}

}  // namespace

void conv2d_forward_dpx(const Context& ctx, Tensor& y, const Tensor& x, const Tensor& w,
                        const Tensor* b, const Conv2dParams& p) {
  const ConvShape s = conv_shape(x, w, p);
  const float* bp = nullptr;
  if (b && b->defined()) {
    bp = b->data<float>();
  }
  const float *xp = x.data<float>(), *wp = w.data<float>();
  float* yp = y.data<float>();
  const bool relu = p.epilogue == Epilogue::relu;
  if (is_depthwise(s)) {
    depthwise_conv2d_forward(ctx, yp, xp, wp, bp, depthwise_shape(s));
    apply_epilogue(ctx, y, p);
    return;
  }
  if (s.batch > 1) {
    // Several images per product; units are (group, chunk of images, block of output rows).
    // Each row block gathers its chunk's patches itself: a copy of Kdim * L floats beside
    // kRowBlock times as many multiply-adds, paid so that one chunk still splits over threads.
    const int64_t row_blocks = (s.Kg + kRowBlock - 1) / kRowBlock, L = s.batch * s.P;
    const int64_t units = s.G * s.chunks * row_blocks;
    const int nt = units > 1 ? threads_for(ctx, conv_macs(s)) : 1;
    const int64_t per_thread = (s.Kdim + kRowBlock) * L;
    const std::vector<int32_t> at = patch_index(s);
    const Scratch<float> bufs(nt * per_thread);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t g = u / (s.chunks * row_blocks), c = (u / row_blocks) % s.chunks;
      const int64_t k0 = g * s.Kg + u % row_blocks * kRowBlock;
      const int64_t kr = std::min(kRowBlock, (g + 1) * s.Kg - k0);
      const int64_t n0 = c * s.batch, nb = std::min(s.batch, s.N - n0), len = nb * s.P;
      float* col = bufs.data() + omp_get_thread_num() * per_thread;
      float* out = col + s.Kdim * L;
      im2col_images(s, at.data(), xp, g, n0, nb, col);
      gemm_one(false, false, kr, len, s.Kdim, 1.f, wp + k0 * s.Kdim, s.Kdim, col, len, 0.f, out, len);
      to_images(s, out, k0, kr, n0, nb, bp, relu, yp);
    }
    return;
  }
  const int64_t units = s.N * s.G * s.tiles;
  const int nt = units > 1 ? threads_for(ctx, conv_macs(s)) : 1;
  const Scratch<float> cols(s.direct ? 0 : nt * s.Kdim * s.tile);

#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t n = u / (s.G * s.tiles), g = (u / s.tiles) % s.G, t = u % s.tiles;
    const int64_t p0 = t * s.tile, len = std::min(s.tile, s.P - p0);
    const float* xg = xp + (n * s.C + g * s.Cg) * s.HW;
    const float* wg = wp + g * s.Kg * s.Kdim;
    float* yt = yp + (n * s.K + g * s.Kg) * s.P + p0;
    if (s.direct) {
      gemm_one(false, false, s.Kg, len, s.Cg, 1.f, wg, s.Kdim, xg + p0, s.HW, 0.f, yt, s.P);
    } else {
      float* col = cols.data() + omp_get_thread_num() * s.Kdim * s.tile;
      im2col_tile(s, xg, p0, len, col);
      gemm_one(false, false, s.Kg, len, s.Kdim, 1.f, wg, s.Kdim, col, len, 0.f, yt, s.P);
    }
    for (int64_t k = 0; k < s.Kg && (bp || relu); ++k) {  // the tile's rows, still in cache
      float* row = yt + k * s.P;
      if (bp) {
        const float bk = bp[g * s.Kg + k];
        for (int64_t i = 0; i < len; ++i) row[i] += bk;
      }
      if (relu)
        for (int64_t i = 0; i < len; ++i) row[i] = relu_of(row[i]);
    }
  }
}

void apply_epilogue(const Context& ctx, Tensor& y, const Conv2dParams& p) {
  if (p.epilogue == Epilogue::relu) relu_into(ctx, y.data<float>(), y.data<float>(), y.numel());
}

void conv2d_backward_dpx(const Context& ctx, Tensor* dx, Tensor* dw, Tensor* db,
                         const Tensor& dy, const Tensor& x, const Tensor& w,
                         const Conv2dParams& p, DxMode dx_mode) {
  const ConvShape s = conv_shape(x, w, p);
  if (s.N == 0) return;  // no images: every gradient gets nothing added
  const float *xp = x.data<float>(), *wp = w.data<float>(), *dyp = dy.data<float>();
  const int nt_all = threads_for(ctx, conv_macs(s));
  const bool depthwise = is_depthwise(s);
  // dx is written over by the products of 1x1 stride-1 convolutions (one product per pixel
  // range); the other paths add into it, so an overwritten dx is zeroed first — per image and
  // group, just before its products, on the path that goes image by image.
  const bool overwrite = dx && dx_mode == DxMode::overwrite;
  if (overwrite && (depthwise || s.batch > 1)) {
    float* dxp = dx->data<float>();
    const int nt = threads_for(ctx, dx->numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < dx->numel(); ++i) dxp[i] = 0.f;
  }
  if (depthwise && (dx || dw))
    depthwise_conv2d_backward(ctx, dx ? dx->data<float>() : nullptr,
                              dw ? dw->data<float>() : nullptr, dyp, xp, wp, depthwise_shape(s));

  if (dx && !depthwise && s.batch > 1) {
    // Several images per product; units are (group, chunk of images, block of input channels),
    // whose dx are apart. Each gathers the chunk's dy itself (Kg * L floats, beside
    // kChanBlock * kh * kw times as many multiply-adds).
    const int64_t taps = s.kh * s.kw, c_blocks = (s.Cg + kChanBlock - 1) / kChanBlock;
    const int64_t units = s.G * s.chunks * c_blocks, L = s.batch * s.P;
    const int nt = units > 1 ? nt_all : 1;
    const int64_t per_thread = (std::min(s.Cg, kChanBlock) * taps + s.Kg) * L;
    const std::vector<int32_t> at = patch_index(s);
    const Scratch<float> bufs(nt * per_thread);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t g = u / (s.chunks * c_blocks), n0 = u / c_blocks % s.chunks * s.batch;
      const int64_t c0 = u % c_blocks * kChanBlock, cn = std::min(kChanBlock, s.Cg - c0);
      const int64_t nb = std::min(s.batch, s.N - n0), len = nb * s.P;
      float* dcol = bufs.data() + omp_get_thread_num() * per_thread;
      float* dyb = dcol + cn * taps * L;
      gather_images(s, dyp, g * s.Kg, s.Kg, n0, nb, dyb);
      // Rows (c, i, j) of W^T for channels c0 ... c0 + cn - 1.
      gemm_one(true, false, cn * taps, len, s.Kg, 1.f, wp + g * s.Kg * s.Kdim + c0 * taps, s.Kdim,
               dyb, len, 0.f, dcol, len);
      col2im_images(s, at.data(), dcol, g, c0, cn, n0, nb, dx->data<float>());
    }
  } else if (dx && !depthwise) {
    // One unit per image and group: tiles of one image overlap in dx, so they run in order.
    float* dxp = dx->data<float>();
    const int64_t units = s.N * s.G;
    const int nt = units > 1 ? nt_all : 1;
    const Scratch<float> cols(s.direct ? 0 : nt * s.Kdim * s.tile);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t n = u / s.G, g = u % s.G;
      float* dxg = dxp + (n * s.C + g * s.Cg) * s.HW;
      const float* wg = wp + g * s.Kg * s.Kdim;
      float* col = s.direct ? nullptr : cols.data() + omp_get_thread_num() * s.Kdim * s.tile;
      if (overwrite && !s.direct) std::fill(dxg, dxg + s.Cg * s.HW, 0.f);
      for (int64_t t = 0; t < s.tiles; ++t) {
        const int64_t p0 = t * s.tile, len = std::min(s.tile, s.P - p0);
        const float* dyt = dyp + (n * s.K + g * s.Kg) * s.P + p0;
        if (s.direct) {
          gemm_one(true, false, s.Cg, len, s.Kg, 1.f, wg, s.Kdim, dyt, s.P, overwrite ? 0.f : 1.f, dxg + p0,
                   s.HW);
        } else {
          gemm_one(true, false, s.Kdim, len, s.Kg, 1.f, wg, s.Kdim, dyt, s.P, 0.f, col, len);
          col2im_tile(s, col, p0, len, dxg);
        }
      }
    }
  }

  if (dw && !depthwise) {
    // Slot q sums images [q*N/S, (q+1)*N/S) into its own partial dW, in image order (a chunk of
    // images per product when they are small); the partials are then added in slot order. S
    // depends on the shapes only, never on threads: no more slots than chunks of images.
    const int64_t dw_numel = s.K * s.Kdim, L = s.batch > 1 ? s.batch * s.P : 0;
    const int64_t budget_slots = kPartialBudgetBytes / std::max<int64_t>(dw_numel * 4, 1);
    const int64_t slots = std::clamp<int64_t>(budget_slots, 1, std::max<int64_t>(s.chunks, 1));
    const int64_t row_blocks = (s.Kg + kRowBlock - 1) / kRowBlock;
    const int64_t units = slots * s.G * row_blocks;
    const int nt = units > 1 ? nt_all : 1;
    const Scratch<float> partial(slots * dw_numel);
    // Per thread: a column tile, or the columns and dy rows of a chunk of images.
    const int64_t per_thread =
        s.batch > 1 ? (s.Kdim + kRowBlock) * L : s.direct ? 0 : s.Kdim * s.tile;
    const std::vector<int32_t> at = s.batch > 1 ? patch_index(s) : std::vector<int32_t>{};
    const Scratch<float> cols(nt * per_thread);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t q = u / (s.G * row_blocks), g = (u / row_blocks) % s.G, rb = u % row_blocks;
      const int64_t k0 = rb * kRowBlock, kr = std::min(kRowBlock, s.Kg - k0);
      float* part = partial.data() + q * dw_numel + (g * s.Kg + k0) * s.Kdim;
      float* col = cols.data() + omp_get_thread_num() * per_thread;
      bool first = true;  // the first product assigns, so the partials need no zeroing
      // part (kr, Kdim) (+)= dy rows (kr, len) times the columns (Kdim, len) transposed.
      const auto accumulate = [&](const float* dyt, int64_t ld_dy, const float* colt, int64_t ld_col,
                                  int64_t len) {
        gemm_one(false, true, kr, s.Kdim, len, 1.f, dyt, ld_dy, colt, ld_col, first ? 0.f : 1.f, part,
                 s.Kdim);
        first = false;
      };
      const int64_t n_end = (q + 1) * s.N / slots;
      if (s.batch > 1) {
        float* dyb = col + s.Kdim * L;
        for (int64_t n0 = q * s.N / slots; n0 < n_end; n0 += s.batch) {
          const int64_t nb = std::min(s.batch, n_end - n0), len = nb * s.P;
          im2col_images(s, at.data(), xp, g, n0, nb, col);
          gather_images(s, dyp, g * s.Kg + k0, kr, n0, nb, dyb);
          accumulate(dyb, len, col, len, len);
        }
        continue;
      }
      for (int64_t n = q * s.N / slots; n < n_end; ++n) {
        const float* xg = xp + (n * s.C + g * s.Cg) * s.HW;
        for (int64_t t = 0; t < s.tiles; ++t) {
          const int64_t p0 = t * s.tile, len = std::min(s.tile, s.P - p0);
          const float* src = xg + p0;
          int64_t stride = s.HW;
          if (!s.direct) {
            im2col_tile(s, xg, p0, len, col);
            src = col, stride = len;
          }
          accumulate(dyp + (n * s.K + g * s.Kg + k0) * s.P + p0, s.P, src, stride, len);
        }
      }
    }
    // Each element sums its slots in slot order, in double; a block of elements at a time, so
    // that the loops run along contiguous partials and vectorise.
    float* dwp = dw->data<float>();
    const int64_t sum_blocks = (dw_numel + kSumBlock - 1) / kSumBlock;
    const int nt_sum = threads_for(ctx, slots * dw_numel);
#pragma omp parallel for num_threads(nt_sum) if (nt_sum > 1)
    for (int64_t blk = 0; blk < sum_blocks; ++blk) {
      const int64_t e0 = blk * kSumBlock, len = std::min(kSumBlock, dw_numel - e0);
      double acc[kSumBlock] = {};
      for (int64_t q = 0; q < slots; ++q) {
        const float* part = partial.data() + q * dw_numel + e0;
        for (int64_t i = 0; i < len; ++i) acc[i] += part[i];
      }
      for (int64_t i = 0; i < len; ++i) dwp[e0 + i] += static_cast<float>(acc[i]);
    }
  }

  if (db) {
    float* dbp = db->data<float>();
    const int nt = threads_for(ctx, s.N * s.K * s.P);
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t k = 0; k < s.K; ++k) dbp[k] += static_cast<float>(channel_sum(dyp, s.N, s.K, s.P, k));
  }
}

}  // namespace dpx::cpu
