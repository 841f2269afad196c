// Pooling on CUDA with dpx's own kernels (cuDNN has no argmax output and no ceil_mode): max pool
// with an i32 argmax (flat h*W+w, first maximum wins), average pool and adaptive average pool,
// with windows and divisors exactly as PyTorch's CUDA kernels compute them; each also on
// channels-last maps (N, H, W, C), the kernels templated on the layout.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/fast_divide.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;
using detail::grid_for;
using detail::kThreads;

// A pooling window; the backward kernels divide coordinates by the strides, which by_sh and
// by_sw do by a multiply-high (kernels/cuda/fast_divide.hpp; every dividend there is a coordinate
// in the padded input, at least 0 and below 2^31): four hardware 32-bit divisions an element, about
// twenty instructions each, cost more than the element's memory traffic (vgg16's max pools'
// backward gathers 392 M elements a step at batch 64).
struct Window {
  int kh, kw, sh, sw, ph, pw;
  FastDivide by_sh, by_sw;
  __device__ int div_h(int v) const { return static_cast<int>(by_sh.div(static_cast<uint32_t>(v))); }
  __device__ int div_w(int v) const { return static_cast<int>(by_sw.div(static_cast<uint32_t>(v))); }
};

// Where a thread's element lies, in either layout of (N, C, H, W) maps (kLast: channels-last,
// (N, H, W, C)): its (n, c) map and its row and column. The window loops read a map's element
// (h, w) at map + (h * W + w) * step(C): contiguous maps are planes (step 1), channels-last ones
// interleave C maps (step C), so that a warp reads 32 neighbouring channels of one pixel.
template <bool kLast>
struct Element {
  int64_t n, c;  // contiguous: n is the plane n * C + c, and c is 0
  int y, x;
  // The offset of this element's map in a tensor of rows x cols maps with C channels.
  __device__ int64_t map(int rows, int cols, int64_t C) const {
    return kLast ? n * rows * cols * C + c : n * rows * cols;
  }
};
template <bool kLast>
__device__ inline int64_t step(int64_t C) {
  return kLast ? C : 1;
}
// The divisions that place an element (below): by a multiply-high where the tensor's indices fit
// 32 bits (narrow, detail::fits_int32; kernels/cuda/fast_divide.hpp), else by the hardware's 64-bit
// division, three or four an element (a long emulated sequence each: vgg16's max-pool backward,
// 205 M elements a step, took 4.2 ms against PyTorch's 3.7 on the H200, 2026-11-28).
struct Placer {
  bool narrow = false;
  FastDivide c, cols, rows;
};
Placer placer(int64_t total, int64_t C, int64_t rows, int64_t cols, bool last) {
  Placer d;
  d.narrow = detail::fits_int32(total);
  if (d.narrow) {  // every size is at least 1 (total > 0) and at most total
    if (last) d.c = FastDivide(static_cast<uint32_t>(C));
    d.cols = FastDivide(static_cast<uint32_t>(cols));
    d.rows = FastDivide(static_cast<uint32_t>(rows));
  }
  return d;
}

// Element i of a tensor of rows x cols maps with C channels (d: placer(total, C, rows, cols)).
template <bool kLast>
__device__ inline Element<kLast> element(int64_t i, int64_t C, int rows, int cols, const Placer& d) {
  if (d.narrow) {
    uint32_t u = static_cast<uint32_t>(i);
    int64_t c = 0;
    if (kLast) {
      const uint32_t q = d.c.div(u);
      c = u - q * static_cast<uint32_t>(C);
      u = q;
    }
    const uint32_t q1 = d.cols.div(u), q2 = d.rows.div(q1);
    return {static_cast<int64_t>(q2), c, static_cast<int>(q1 - q2 * static_cast<uint32_t>(rows)),
            static_cast<int>(u - q1 * static_cast<uint32_t>(cols))};
  }
  int64_t c = 0;
  if (kLast) {
    c = i % C;
    i /= C;
  }
  const int x = static_cast<int>(i % cols), y = static_cast<int>((i / cols) % rows);
  return {i / (static_cast<int64_t>(cols) * rows), c, y, x};
}

// X, Y: x's and y's element types (detail::XF32, or XHalf for a half-precision map, read
// widened and rounded at the store: the rounded fp32 maximum, as rounding is monotone).
template <bool kLast, typename X, typename Y>
__global__ void max_pool_forward_kernel(typename Y::T* y, int32_t* argmax, const typename X::T* x, int64_t total,
                                        int64_t C, int H, int W, int OH, int OW, Window k, Placer d) {
  DPX_CUDA_LOOP(i, total) {
    const Element<kLast> e = element<kLast>(i, C, OH, OW, d);
    int hs = e.y * k.sh - k.ph, ws = e.x * k.sw - k.pw;
    int he = min(hs + k.kh, H), we = min(ws + k.kw, W);
    hs = max(hs, 0);
    ws = max(ws, 0);
    const typename X::T* xp = x + e.map(H, W, C);
    float best = -INFINITY;
    int best_at = hs * W + ws;
    // Strictly greater: the first maximum in row-major order wins; NaN propagates (the last
    // NaN's index, as PyTorch and the CPU op).
    for (int h = hs; h < he; ++h)
      for (int w = ws; w < we; ++w) {
        const float v = X::load(xp[(h * W + w) * step<kLast>(C)]);
        if (v > best || isnan(v)) {
          best = v;
          best_at = h * W + w;
        }
      }
    y[i] = Y::store(best);
    argmax[i] = best_at;
  }
}

// The backward gathers: each input element adds the gradients of the outputs whose window holds
// it and whose argmax it is, in output order (oh, then ow: the order in which the CPU op adds them,
// from the value dx held, so the sums are the CPU's bit for bit), with no float atomics: the same
// bits every run, also where windows overlap (PyTorch's max_pool2d backward gathers too). An argmax
// outside the plane (not from max_pool2d_forward) matches no element and is ignored.
// G, D: dy's and dx's element types (detail::XF32, or XHalf for a half-precision map: dy read
// widened, the fp32 sum rounded once at dx's store; a half dx is always written over, ops.def).
template <bool kLast, typename G, typename D>
__global__ void max_pool_backward_kernel(typename D::T* dx, const typename G::T* dy, const int32_t* argmax,
                                         int64_t total, int64_t C, int H, int W, int OH, int OW, Window k, Placer d,
                                         bool overwrite) {
  DPX_CUDA_LOOP(i, total) {
    const Element<kLast> e = element<kLast>(i, C, H, W, d);
    const int h = e.y, w = e.x;
    // The outputs oh whose window [oh*sh - ph, oh*sh - ph + kh) holds h, likewise ow.
    const int lo_h = h + k.ph - k.kh + 1, lo_w = w + k.pw - k.kw + 1;
    const int oh0 = lo_h <= 0 ? 0 : k.div_h(lo_h + k.sh - 1), oh1 = min(k.div_h(h + k.ph) + 1, OH);
    const int ow0 = lo_w <= 0 ? 0 : k.div_w(lo_w + k.sw - 1), ow1 = min(k.div_w(w + k.pw) + 1, OW);
    const int64_t out_map = e.map(OH, OW, C);
    const typename G::T* dyp = dy + out_map;
    const int32_t* ap = argmax + out_map;
    const int32_t me = h * W + w;
    float v = overwrite ? 0.f : D::load(dx[i]);  // written over: no zero-fill before, no read
    for (int oh = oh0; oh < oh1; ++oh)
      for (int ow = ow0; ow < ow1; ++ow) {
        const int64_t o = (oh * OW + ow) * step<kLast>(C);
        if (ap[o] == me) v += G::load(dyp[o]);
      }
    dx[i] = D::store(v);
  }
}

// PyTorch's window: clipped to the padded input for count_include_pad, then to the input.
struct AvgWindow {
  int hs, he, ws, we, divisor;
};

__device__ inline AvgWindow avg_window(int oh, int ow, int H, int W, const Window& k, bool include_pad) {
  int hs = oh * k.sh - k.ph, ws = ow * k.sw - k.pw;
  int he = min(hs + k.kh, H + k.ph), we = min(ws + k.kw, W + k.pw);
  int pool_size = (he - hs) * (we - ws);
  hs = max(hs, 0);
  ws = max(ws, 0);
  he = min(he, H);
  we = min(we, W);
  return {hs, he, ws, we, include_pad ? pool_size : (he - hs) * (we - ws)};
}

template <bool kLast>
__global__ void avg_pool_forward_kernel(float* y, const float* x, int64_t total, int64_t C, int H, int W, int OH,
                                        int OW, Window k, bool include_pad, Placer d) {
  DPX_CUDA_LOOP(i, total) {
    const Element<kLast> e = element<kLast>(i, C, OH, OW, d);
    AvgWindow a = avg_window(e.y, e.x, H, W, k, include_pad);
    if (a.hs >= a.he || a.ws >= a.we) {
      y[i] = 0.f;
      continue;
    }
    const float* xp = x + e.map(H, W, C);
    float sum = 0.f;
    for (int h = a.hs; h < a.he; ++h)
      for (int w = a.ws; w < a.we; ++w) sum += xp[(h * W + w) * step<kLast>(C)];
    y[i] = sum / static_cast<float>(a.divisor);
  }
}

// One thread per input element gathers from the outputs whose windows contain it: no atomics,
// so the result is deterministic.
template <bool kLast>
__global__ void avg_pool_backward_kernel(float* dx, const float* dy, int64_t total, int64_t C, int H, int W, int OH,
                                         int OW, Window k, bool include_pad, Placer d, bool overwrite) {
  DPX_CUDA_LOOP(i, total) {
    const Element<kLast> e = element<kLast>(i, C, H, W, d);
    int w = e.x + k.pw;  // coordinates in the padded input
    int h = e.y + k.ph;
    int oh0 = h < k.kh ? 0 : k.div_h(h - k.kh) + 1, oh1 = min(k.div_h(h) + 1, OH);
    int ow0 = w < k.kw ? 0 : k.div_w(w - k.kw) + 1, ow1 = min(k.div_w(w) + 1, OW);
    const float* dyp = dy + e.map(OH, OW, C);
    float g = 0.f;
    for (int oh = oh0; oh < oh1; ++oh)
      for (int ow = ow0; ow < ow1; ++ow) {
        AvgWindow a = avg_window(oh, ow, H, W, k, include_pad);
        if (a.hs >= a.he || a.ws >= a.we) continue;
        g += dyp[(oh * OW + ow) * step<kLast>(C)] / static_cast<float>(a.divisor);
      }
    dx[i] = (overwrite ? 0.f : dx[i]) + g;  // written over: from 0, as added into zeros
  }
}

// Adaptive bins as PyTorch: [floor(i*In/Out), ceil((i+1)*In/Out)).
__device__ inline int bin_start(int i, int in, int out) { return static_cast<int>((static_cast<int64_t>(i) * in) / out); }
__device__ inline int bin_end(int i, int in, int out) {
  return static_cast<int>((static_cast<int64_t>(i + 1) * in + out - 1) / out);
}

template <bool kLast>
__global__ void adaptive_avg_forward_kernel(float* y, const float* x, int64_t total, int64_t C, int H, int W, int OH,
                                            int OW, Placer d) {
  DPX_CUDA_LOOP(i, total) {
    const Element<kLast> e = element<kLast>(i, C, OH, OW, d);
    int hs = bin_start(e.y, H, OH), he = bin_end(e.y, H, OH);
    int ws = bin_start(e.x, W, OW), we = bin_end(e.x, W, OW);
    const float* xp = x + e.map(H, W, C);
    double sum = 0;  // as the CPU op: a global pool sums whole maps
    for (int h = hs; h < he; ++h)
      for (int w = ws; w < we; ++w) sum += xp[(h * W + w) * step<kLast>(C)];
    y[i] = static_cast<float>(sum / static_cast<double>((he - hs) * (we - ws)));
  }
}

// Input row h lies in the bins oh in [floor(h*OH/H), ceil((h+1)*OH/H)); membership is still
// checked exactly. Gathering keeps the backward deterministic.
template <bool kLast>
__global__ void adaptive_avg_backward_kernel(float* dx, const float* dy, int64_t total, int64_t C, int H, int W,
                                             int OH, int OW, Placer d, bool overwrite) {
  DPX_CUDA_LOOP(i, total) {
    const Element<kLast> e = element<kLast>(i, C, H, W, d);
    const int h = e.y, w = e.x;
    int oh0 = static_cast<int>((static_cast<int64_t>(h) * OH) / H);
    int oh1 = min(OH, static_cast<int>((static_cast<int64_t>(h + 1) * OH + H - 1) / H));
    int ow0 = static_cast<int>((static_cast<int64_t>(w) * OW) / W);
    int ow1 = min(OW, static_cast<int>((static_cast<int64_t>(w + 1) * OW + W - 1) / W));
    const float* dyp = dy + e.map(OH, OW, C);
    float g = 0.f;
    for (int oh = oh0; oh < oh1; ++oh) {
      int hs = bin_start(oh, H, OH), he = bin_end(oh, H, OH);
      if (h < hs || h >= he) continue;
      for (int ow = ow0; ow < ow1; ++ow) {
        int ws = bin_start(ow, W, OW), we = bin_end(ow, W, OW);
        if (w < ws || w >= we) continue;
        g += dyp[(oh * OW + ow) * step<kLast>(C)] / static_cast<float>((he - hs) * (we - ws));
      }
    }
    dx[i] = (overwrite ? 0.f : dx[i]) + g;  // written over: from 0, as added into zeros
  }
}

// Global average pooling (a 1x1 output: EfficientNet's squeeze-and-excitation blocks, every
// classifier head), the case the general kernel above serves worst: there one thread sums a whole
// map alone (12,544 values in EfficientNet's first blocks, 6.3 ms a step against PyTorch's 0.3 ms
// on the H100, 2026-11-26). Here a warp takes a map: each lane sums a strided slice in double, then
// the lanes' sums are added in a fixed tree order, so the result does not depend on the grid.
__global__ void global_avg_forward_kernel(float* y, const float* x, int64_t planes, int64_t plane_size) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t p = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5; p < planes; p += warps) {
    const float* xp = x + p * plane_size;
    double s = 0;
    for (int64_t j = lane; j < plane_size; j += 32) s += xp[j];
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_down_sync(0xffffffffu, s, offset);
    if (lane == 0) y[p] = static_cast<float>(s / static_cast<double>(plane_size));
  }
}

// Its backward: every input of a map gets the map's gradient over the map's size (the general
// kernel's arithmetic, bit for bit, without its bin search per element). I, Div: uint32_t and
// FastDivide where dx's elements fit 31 bits, so that the map of an element costs a multiply-high,
// not a division; else uint64_t and PlainDivide.
template <typename I, typename Div>
__global__ void global_avg_backward_kernel(float* dx, const float* dy, I total, Div plane_size, bool overwrite) {
  const float divisor = static_cast<float>(plane_size.divisor);
  DPX_CUDA_LOOP_AS(I, i, total) dx[i] = (overwrite ? 0.f : dx[i]) + dy[plane_size.div(i)] / divisor;
}

// The same for maps of at least a block's worth of values (EfficientNet's 112 x 112 and 56 x 56
// squeeze-excitation maps: most of its bytes) by detail::per_plane: no index arithmetic per
// element, float4s where the maps allow.
struct AddMeanGradient {
  float divisor;
  __device__ float operator()(float old, float, float g) const { return old + g / divisor; }
};

// Written over (`overwrite`): `old` is 0 (per_plane's V{} where it does not read out), so the
// values are those added into zeros, bit for bit.
void global_avg_backward(const CudaState& st, float* dx, const float* dy, int64_t planes, int64_t plane,
                         bool overwrite) {
  const AddMeanGradient f{static_cast<float>(plane)};
  if (overwrite ? detail::per_plane_f32<false>(st.stream, dx, nullptr, dy, planes, plane, planes, f)
                : detail::per_plane_f32<true>(st.stream, dx, nullptr, dy, planes, plane, planes, f))
    return;
  if (detail::fits_int32(planes * plane)) {
    global_avg_backward_kernel<<<grid_for(planes * plane), kThreads, 0, st.stream>>>(
        dx, dy, static_cast<uint32_t>(planes * plane), FastDivide(static_cast<uint32_t>(plane)), overwrite);
    check_launch();
  } else {
    global_avg_backward_kernel<<<grid_for(planes * plane), kThreads, 0, st.stream>>>(
        dx, dy, static_cast<uint64_t>(planes * plane), PlainDivide(static_cast<uint64_t>(plane)), overwrite);
    check_launch();
  }
}

Window window_of(const Pool2dParams& p) {  // strides of at least 1 (op_checks)
  return {p.kernel_h,
          p.kernel_w,
          p.stride_h,
          p.stride_w,
          p.pad_h,
          p.pad_w,
          FastDivide(static_cast<uint32_t>(p.stride_h)),
          FastDivide(static_cast<uint32_t>(p.stride_w))};
}

}  // namespace

void max_pool2d_forward(Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x, const Pool2dParams& p) {
  CudaState& st = state_of(ctx);
  const char* op = "max_pool2d_forward";
  int64_t total = y.numel();
  if (total == 0) return;
  const ops::ImageDims in = ops::image_dims(x.shape(), p.format), out = ops::image_dims(y.shape(), p.format);
  const bool last = p.format == MemoryFormat::channels_last;
  detail::with_x_type(x.dtype(), [&](auto x_type) {
    detail::with_x_type(y.dtype(), [&](auto y_type) {
      using X = decltype(x_type);
      using Y = decltype(y_type);
      const auto kernel = last ? max_pool_forward_kernel<true, X, Y> : max_pool_forward_kernel<false, X, Y>;
      kernel<<<grid_for(total), kThreads, 0, st.stream>>>(
          detail::x_data<Y>(y, op, "y"), static_cast<int32_t*>(argmax.raw()), detail::x_data<X>(x, op, "x"), total,
          in.c, int(in.h), int(in.w), int(out.h), int(out.w), window_of(p), placer(total, in.c, out.h, out.w, last));
      check_launch();
    });
  });
}

void max_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& argmax, const Pool2dParams& p,
                         DxMode dx_mode) {
  CudaState& st = state_of(ctx);
  const char* op = "max_pool2d_backward";
  const int64_t total = dx.numel();
  if (total == 0 || dy.numel() == 0) return;
  const ops::ImageDims in = ops::image_dims(dx.shape(), p.format), out = ops::image_dims(dy.shape(), p.format);
  const bool last = p.format == MemoryFormat::channels_last;
  detail::with_x_type(dy.dtype(), [&](auto dy_type) {
    detail::with_x_type(dx.dtype(), [&](auto dx_type) {
      using G = decltype(dy_type);
      using D = decltype(dx_type);
      const auto kernel = last ? max_pool_backward_kernel<true, G, D> : max_pool_backward_kernel<false, G, D>;
      kernel<<<grid_for(total), kThreads, 0, st.stream>>>(
          detail::x_data<D>(dx, op, "dx"), detail::x_data<G>(dy, op, "dy"), static_cast<const int32_t*>(argmax.raw()),
          total, in.c, int(in.h), int(in.w), int(out.h), int(out.w), window_of(p),
          placer(total, in.c, in.h, in.w, last), dx_mode == DxMode::overwrite);
      check_launch();
    });
  });
}

void avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Pool2dParams& p) {
  CudaState& st = state_of(ctx);
  const char* op = "avg_pool2d_forward";
  int64_t total = y.numel();
  if (total == 0) return;
  const ops::ImageDims in = ops::image_dims(x.shape(), p.format), out = ops::image_dims(y.shape(), p.format);
  const bool last = p.format == MemoryFormat::channels_last;
  const auto kernel = last ? avg_pool_forward_kernel<true> : avg_pool_forward_kernel<false>;
  kernel<<<grid_for(total), kThreads, 0, st.stream>>>(f32(y, op, "y"), f32(x, op, "x"), total, in.c, int(in.h),
                                                      int(in.w), int(out.h), int(out.w), window_of(p),
                                                      p.count_include_pad, placer(total, in.c, out.h, out.w, last));
  check_launch();
}

void avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Pool2dParams& p, DxMode dx_mode) {
  CudaState& st = state_of(ctx);
  const char* op = "avg_pool2d_backward";
  int64_t total = dx.numel();
  if (total == 0 || dy.numel() == 0) return;
  const ops::ImageDims in = ops::image_dims(dx.shape(), p.format), out = ops::image_dims(dy.shape(), p.format);
  const bool last = p.format == MemoryFormat::channels_last;
  const auto kernel = last ? avg_pool_backward_kernel<true> : avg_pool_backward_kernel<false>;
  kernel<<<grid_for(total), kThreads, 0, st.stream>>>(f32(dx, op, "dx"), f32(dy, op, "dy"), total, in.c, int(in.h),
                                                      int(in.w), int(out.h), int(out.w), window_of(p),
                                                      p.count_include_pad, placer(total, in.c, in.h, in.w, last),
                                                      dx_mode == DxMode::overwrite);
  check_launch();
}

// A 1x1 output of contiguous maps runs the warp-per-map kernels; every other case, channels-last
// maps' global pool included (there neighbouring threads read neighbouring channels), the bins'.
void adaptive_avg_pool2d_forward(Context& ctx, Tensor& y, const Tensor& x, MemoryFormat format) {
  CudaState& st = state_of(ctx);
  const char* op = "adaptive_avg_pool2d_forward";
  int64_t total = y.numel();
  if (total == 0) return;
  const ops::ImageDims in = ops::image_dims(x.shape(), format), out = ops::image_dims(y.shape(), format);
  const bool last = format == MemoryFormat::channels_last;
  if (!last && out.h == 1 && out.w == 1) {
    global_avg_forward_kernel<<<grid_for(total * 32), kThreads, 0, st.stream>>>(f32(y, op, "y"), f32(x, op, "x"),
                                                                                 total, in.h * in.w);
    check_launch();
    return;
  }
  const auto kernel = last ? adaptive_avg_forward_kernel<true> : adaptive_avg_forward_kernel<false>;
  kernel<<<grid_for(total), kThreads, 0, st.stream>>>(f32(y, op, "y"), f32(x, op, "x"), total, in.c, int(in.h),
                                                      int(in.w), int(out.h), int(out.w),
                                                      placer(total, in.c, out.h, out.w, last));
  check_launch();
}

void adaptive_avg_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, MemoryFormat format, DxMode dx_mode) {
  CudaState& st = state_of(ctx);
  const char* op = "adaptive_avg_pool2d_backward";
  int64_t total = dx.numel();
  if (total == 0 || dy.numel() == 0) return;
  const ops::ImageDims in = ops::image_dims(dx.shape(), format), out = ops::image_dims(dy.shape(), format);
  const bool last = format == MemoryFormat::channels_last;
  if (!last && out.h == 1 && out.w == 1) {
    global_avg_backward(st, f32(dx, op, "dx"), f32(dy, op, "dy"), dy.numel(), in.h * in.w,
                        dx_mode == DxMode::overwrite);
    return;
  }
  const auto kernel = last ? adaptive_avg_backward_kernel<true> : adaptive_avg_backward_kernel<false>;
  kernel<<<grid_for(total), kThreads, 0, st.stream>>>(f32(dx, op, "dx"), f32(dy, op, "dy"), total, in.c, int(in.h),
                                                      int(in.w), int(out.h), int(out.w),
                                                      placer(total, in.c, in.h, in.w, last), dx_mode == DxMode::overwrite);
  check_launch();
}

}  // namespace dpx::cuda
