// Depthwise convolution on CUDA (kernels/cuda/depthwise_conv.cuh), as PyTorch's own fp32 kernels
// do it rather than cuDNN: one thread per output element forward, one per input element for the
// input gradient (a gather over the taps that reach it), and for the weight gradient blocks that
// each sum every tap of a channel (3x3 and 5x5 filters; other sizes one tap a block) over a chunk
// of the images' positions, the chunks then added in order.
// Indices are 32-bit where the tensors allow (as PyTorch's canUse32BitIndexMath), and forward and
// input gradient run a block row per (image, channel) plane, so an element's place costs one
// division by the row length, not four 64-bit ones: on the H100 (2026-11-27) the 64-bit
// version left EfficientNet-B0's convolutions at 14.6 ms forward and 36.3 ms backward a step
// against PyTorch's 4.9 and 19.0. With 32-bit indices that division, and the input gradient's by
// the strides at every tap, are multiply-highs (DepthwiseShape's dividers).
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/depthwise_conv.cuh"

namespace dpx::cuda::detail {

namespace {

// A block row per plane (blockIdx.y, striding by gridDim.y), its threads striding over the
// plane's positions (DPX_CUDA_LOOP_AS(I, r, positions)).
#define DPX_PLANE_LOOP(plane, planes) for (I plane = blockIdx.y; plane < (planes); plane += I(gridDim.y))

// KH x KW: the filter's size where it is a template argument (3x3 and 5x5: the tap loops unrolled,
// as PyTorch's kernels are for those sizes), 0 x 0 where the loops read it from the shape. The
// order of the sums is the same either way.
template <typename I, int KH, int KW>
__global__ void depthwise_forward_kernel(float* y, const float* x, const float* w, const float* b, DepthwiseShape s) {
  const int kh = KH > 0 ? KH : s.kh, kw = KW > 0 ? KW : s.kw;
  const I positions = I(s.oh) * I(s.ow), planes = I(s.n) * I(s.k), image = I(s.h) * I(s.w);
  DPX_PLANE_LOOP(plane, planes) {  // plane = n * K + k
    const I k = plane % I(s.k), n = plane / I(s.k), c = k / s.multiplier;
    const float* xp = x + (n * I(s.c) + c) * image;
    const float* wp = w + k * I(kh * kw);
    float* yp = y + plane * positions;
    DPX_CUDA_LOOP_AS(I, r, positions) {
      const int oh = static_cast<int>(quotient(r, I(s.ow), s.by_ow)), ow = static_cast<int>(r - I(oh) * I(s.ow));
      float acc = 0.f;
#pragma unroll
      for (int a = 0; a < kh; ++a) {
        const int ih = oh * s.sh - s.ph + a * s.dh;
        if (ih < 0 || ih >= s.h) continue;
#pragma unroll
        for (int q = 0; q < kw; ++q) {
          const int iw = ow * s.sw - s.pw + q * s.dw;
          if (iw < 0 || iw >= s.w) continue;
          acc += xp[I(ih) * I(s.w) + iw] * wp[a * kw + q];
        }
      }
      yp[r] = b ? acc + b[k] : acc;  // the bias after the sum, as cuDNN's result plus the bias op
    }
  }
}

// dx[n, c, ih, iw]: every tap (a, q) of every output channel of c whose output position lands on
// (ih, iw): oh * sh = ih + ph - a * dh, likewise ow.
template <typename I, int KH, int KW>
__global__ void depthwise_backward_data_kernel(float* dx, const float* dy, const float* w, DepthwiseShape s,
                                               bool accumulate) {
  const int kh = KH > 0 ? KH : s.kh, kw = KW > 0 ? KW : s.kw;
  const I positions = I(s.h) * I(s.w), planes = I(s.n) * I(s.c), out_plane = I(s.oh) * I(s.ow);
  DPX_PLANE_LOOP(plane, planes) {  // plane = n * C + c
    const I c = plane % I(s.c), n = plane / I(s.c);
    float* dxp = dx + plane * positions;
    DPX_CUDA_LOOP_AS(I, r, positions) {
      const int ih = static_cast<int>(quotient(r, I(s.w), s.by_w)), iw = static_cast<int>(r - I(ih) * I(s.w));
      float acc = 0.f;
      for (int m = 0; m < s.multiplier; ++m) {
        const I k = c * s.multiplier + m;
        const float* dyp = dy + (n * I(s.k) + k) * out_plane;
        const float* wp = w + k * I(kh * kw);
#pragma unroll
        for (int a = 0; a < kh; ++a) {
          // The output row oh with oh * sh = th, if any: th a coordinate in [0, 2^31), so the
          // multiply-high divides exactly (two hardware divisions a tap were most of the work).
          const int th = ih + s.ph - a * s.dh;
          if (th < 0) continue;
          const int oh = static_cast<int>(s.by_sh.div(static_cast<uint32_t>(th)));
          if (oh * s.sh != th || oh >= s.oh) continue;
#pragma unroll
          for (int q = 0; q < kw; ++q) {
            const int tw = iw + s.pw - q * s.dw;
            if (tw < 0) continue;
            const int ow = static_cast<int>(s.by_sw.div(static_cast<uint32_t>(tw)));
            if (ow * s.sw != tw || ow >= s.ow) continue;
            acc += dyp[I(oh) * I(s.ow) + ow] * wp[a * kw + q];
          }
        }
      }
      dxp[r] = accumulate ? dxp[r] + acc : acc;
    }
  }
}

// One block per (tap, chunk): the tap (k, a, q) is blockIdx.x, the chunk of the N x OH x OW output
// positions blockIdx.y; the block's sum goes to partial[chunk, tap].
template <typename I>
__global__ void depthwise_filter_partial_kernel(float* partial, const float* dy, const float* x, DepthwiseShape s,
                                                I chunk_len) {
  __shared__ float shared[33];
  const I tap = blockIdx.x, taps = gridDim.x;
  const int q = static_cast<int>(tap % I(s.kw)), a = static_cast<int>((tap / I(s.kw)) % I(s.kh));
  const I k = tap / I(s.kw * s.kh), c = k / s.multiplier;
  const I per_image = I(s.oh) * I(s.ow), count = I(s.n) * per_image, image = I(s.h) * I(s.w);
  const I first = I(blockIdx.y) * chunk_len, last = first + min(chunk_len, count - first);
  float acc = 0.f;
  for (I j = first + I(threadIdx.x); j < last; j += I(blockDim.x)) {
    const I n = j / per_image, r = j - n * per_image;
    const int oh = static_cast<int>(quotient(r, I(s.ow), s.by_ow)), ow = static_cast<int>(r - I(oh) * I(s.ow));
    const int ih = oh * s.sh - s.ph + a * s.dh, iw = ow * s.sw - s.pw + q * s.dw;
    if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
    acc += dy[(n * I(s.k) + k) * per_image + r] * x[(n * I(s.c) + c) * image + I(ih) * I(s.w) + iw];
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[I(blockIdx.y) * taps + tap] = acc;
}

// The same sums for a KH x KW filter, every tap of a channel in one block: a block per (output
// channel k, chunk of the N x OH x OW positions), kThreads threads over the chunk; a thread reads
// dy at a position once and adds dy * x under each tap into a register of its own; then each warp
// sums its taps, and a thread per tap adds the warps' sums in order into partial[chunk, k, tap],
// the layout above (one barrier, a fixed order). The kernel above reads
// dy once per tap (25 times for 5x5) and divides twice per position and tap: EfficientNet-B0's
// depthwise backward took 16 ms a step on the H200 (2026-11-28), a third of its step.
template <typename I, int KH, int KW>
__global__ void depthwise_filter_taps_kernel(float* partial, const float* dy, const float* x, DepthwiseShape s,
                                             I chunk_len) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float warp_sums[kWarps][KH * KW];
  const I k = blockIdx.x, c = k / s.multiplier;
  const I per_image = I(s.oh) * I(s.ow), image = I(s.h) * I(s.w), count = I(s.n) * per_image;
  const I first = I(blockIdx.y) * chunk_len, last = first + min(chunk_len, count - first);
  float acc[KH * KW];
#pragma unroll
  for (int t = 0; t < KH * KW; ++t) acc[t] = 0.f;
  for (I j = first + I(threadIdx.x); j < last; j += I(blockDim.x)) {
    const I n = j / per_image, r = j - n * per_image;
    const int oh = static_cast<int>(quotient(r, I(s.ow), s.by_ow)), ow = static_cast<int>(r - I(oh) * I(s.ow));
    const float g = dy[(n * I(s.k) + k) * per_image + r];
    const float* xp = x + (n * I(s.c) + c) * image;
#pragma unroll
    for (int a = 0; a < KH; ++a) {
      const int ih = oh * s.sh - s.ph + a * s.dh;
#pragma unroll
      for (int q = 0; q < KW; ++q) {
        const int iw = ow * s.sw - s.pw + q * s.dw;
        if (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w) acc[a * KW + q] += g * xp[I(ih) * I(s.w) + iw];
      }
    }
  }
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
#pragma unroll
  for (int t = 0; t < KH * KW; ++t) {
    const float v = warp_sum(acc[t]);
    if (lane == 0) warp_sums[warp][t] = v;
  }
  __syncthreads();
  for (int t = static_cast<int>(threadIdx.x); t < KH * KW; t += static_cast<int>(blockDim.x)) {
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w) sum += warp_sums[w][t];
    partial[(I(blockIdx.y) * I(s.k) + k) * (KH * KW) + t] = sum;
  }
}

__global__ void depthwise_filter_finish_kernel(float* dw, const float* partial, int64_t taps, int64_t chunks) {
  DPX_CUDA_LOOP(tap, taps) {
    float acc = 0.f;
    for (int64_t c = 0; c < chunks; ++c) acc += partial[c * taps + tap];
    dw[tap] += acc;
  }
}

// Whether every index of the convolution's tensors (and of `extra` more elements) fits 32 bits.
bool fits_int32(const DepthwiseShape& s, int64_t extra = 0) {
  return detail::fits_int32(s.n * s.c * s.h * s.w) && detail::fits_int32(s.n * s.k * s.oh * s.ow) &&
         detail::fits_int32(s.k * s.kh * s.kw) && detail::fits_int32(extra);
}

// A block row per plane (at most 65,535 rows; the loop covers the rest), blocks of a power of
// two from 32 to 256 threads, no larger than a plane needs (7x7 planes: 64), and enough of them
// along x to cover the plane.
struct PlaneGrid {
  dim3 grid, block;
};
PlaneGrid plane_grid(int64_t planes, int64_t positions) {
  int threads = 32;
  while (threads < kThreads && threads < positions) threads *= 2;
  return {dim3(grid_for(positions, threads), static_cast<unsigned>(std::min<int64_t>(planes, 65535))),
          dim3(static_cast<unsigned>(threads))};
}

}  // namespace

// Calls f(KH, KW) with the filter's size as std::integral_constants where the kernels have it as
// template arguments (3x3 and 5x5, EfficientNet's and MobileNet's), else with 0, 0 (the kernels for
// any size): the one list of the sizes compiled for.
template <typename F>
void by_filter_size(const DepthwiseShape& s, F f) {
  using std::integral_constant;
  if (s.kh == 3 && s.kw == 3)
    f(integral_constant<int, 3>{}, integral_constant<int, 3>{});
  else if (s.kh == 5 && s.kw == 5)
    f(integral_constant<int, 5>{}, integral_constant<int, 5>{});
  else
    f(integral_constant<int, 0>{}, integral_constant<int, 0>{});
}

void depthwise_forward(const CudaState& st, float* y, const float* x, const float* w, const float* b,
                       const DepthwiseShape& s) {
  const int64_t planes = s.n * s.k, positions = s.oh * s.ow;
  if (planes == 0 || positions == 0) return;
  const PlaneGrid g = plane_grid(planes, positions);
  by_filter_size(s, [&](auto kh, auto kw) {
    if (fits_int32(s))
      depthwise_forward_kernel<int32_t, kh, kw><<<g.grid, g.block, 0, st.stream>>>(y, x, w, b, s);
    else
      depthwise_forward_kernel<int64_t, kh, kw><<<g.grid, g.block, 0, st.stream>>>(y, x, w, b, s);
  });
  check_launch();
}

void depthwise_backward_data(const CudaState& st, float* dx, const float* dy, const float* w, const DepthwiseShape& s,
                             bool accumulate) {
  const int64_t planes = s.n * s.c, positions = s.h * s.w;
  if (planes == 0 || positions == 0) return;
  const PlaneGrid g = plane_grid(planes, positions);
  by_filter_size(s, [&](auto kh, auto kw) {
    if (fits_int32(s))
      depthwise_backward_data_kernel<int32_t, kh, kw><<<g.grid, g.block, 0, st.stream>>>(dx, dy, w, s, accumulate);
    else
      depthwise_backward_data_kernel<int64_t, kh, kw><<<g.grid, g.block, 0, st.stream>>>(dx, dy, w, s, accumulate);
  });
  check_launch();
}

// The taps kernel for a KH x KW filter (kThreads threads a block): chunks of the positions,
// enough for about 1,024 blocks where the positions allow, each of at least 2,048 (8 a thread).
template <int KH, int KW>
void filter_by_taps(const CudaState& st, float* dw, const float* dy, const float* x, const DepthwiseShape& s) {
  const int64_t taps = s.k * KH * KW, count = s.n * s.oh * s.ow;
  const int64_t wanted = std::clamp<int64_t>(std::min((1024 + s.k - 1) / s.k, count / 2048), 1, 65535);
  const int64_t chunk_len = (count + wanted - 1) / wanted;
  const int64_t chunks = (count + chunk_len - 1) / chunk_len;
  DPX_CHECK(s.k < int64_t(1) << 31, "conv2d_backward: ", s.k, " depthwise channels exceed the grid");
  const Scratch partial(st, static_cast<size_t>(chunks * taps) * sizeof(float));
  const dim3 grid(static_cast<unsigned>(s.k), static_cast<unsigned>(chunks));
  if (fits_int32(s, chunks * taps))
    depthwise_filter_taps_kernel<int32_t, KH, KW><<<grid, kThreads, 0, st.stream>>>(
        partial.as<float>(), dy, x, s, static_cast<int32_t>(chunk_len));
  else
    depthwise_filter_taps_kernel<int64_t, KH, KW>
        <<<grid, kThreads, 0, st.stream>>>(partial.as<float>(), dy, x, s, chunk_len);
  check_launch();
  depthwise_filter_finish_kernel<<<grid_for(taps), kThreads, 0, st.stream>>>(dw, partial.as<float>(), taps, chunks);
  check_launch();
}

// The kernel above for any filter size: a block per tap and chunk of the positions, at least 64
// positions a thread, at most 1024 chunks (grid.y <= 65535).
void filter_per_tap(const CudaState& st, float* dw, const float* dy, const float* x, const DepthwiseShape& s) {
  const int64_t taps = s.k * s.kh * s.kw, count = s.n * s.oh * s.ow;
  const int64_t min_chunk = int64_t(kThreads) * 64;
  const int64_t chunks = std::clamp<int64_t>(count / min_chunk, 1, 1024);
  const int64_t chunk_len = (count + chunks - 1) / chunks;
  const int64_t used = (count + chunk_len - 1) / chunk_len;
  DPX_CHECK(taps < int64_t(1) << 31, "conv2d_backward: ", taps, " depthwise weights exceed the grid");
  const Scratch partial(st, static_cast<size_t>(used * taps) * sizeof(float));
  const dim3 grid(static_cast<unsigned>(taps), static_cast<unsigned>(used));
  if (fits_int32(s, used * taps))
    depthwise_filter_partial_kernel<int32_t>
        <<<grid, kThreads, 0, st.stream>>>(partial.as<float>(), dy, x, s, static_cast<int32_t>(chunk_len));
  else
    depthwise_filter_partial_kernel<int64_t><<<grid, kThreads, 0, st.stream>>>(partial.as<float>(), dy, x, s, chunk_len);
  check_launch();
  depthwise_filter_finish_kernel<<<grid_for(taps), kThreads, 0, st.stream>>>(dw, partial.as<float>(), taps, used);
  check_launch();
}

void depthwise_backward_filter(const CudaState& st, float* dw, const float* dy, const float* x,
                               const DepthwiseShape& s) {
  if (s.k * s.kh * s.kw == 0 || s.n * s.oh * s.ow == 0) return;
  // The sizes compiled for take every tap of a channel in one block; others a block per tap.
  by_filter_size(s, [&](auto kh, auto kw) {
    if constexpr (kh > 0) filter_by_taps<kh, kw>(st, dw, dy, x, s);
    else filter_per_tap(st, dw, dy, x, s);
  });
}

}  // namespace dpx::cuda::detail
