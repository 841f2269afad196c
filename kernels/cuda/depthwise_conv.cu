// Depthwise convolution on CUDA (kernels/cuda/depthwise_conv.cuh), as PyTorch's own fp32 kernels
// do it rather than cuDNN: one thread per output element forward, one per input element for the
// input gradient (a gather over the taps that reach it), and for the weight gradient blocks that
// each sum one tap over a chunk of the images' positions, the chunks then added in order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/depthwise_conv.cuh"

namespace dpx::cuda::detail {

namespace {

__global__ void depthwise_forward_kernel(float* y, const float* x, const float* w, const float* b,
                                         DepthwiseShape s, int64_t total) {
  DPX_CUDA_LOOP(i, total) {
    const int ow = static_cast<int>(i % s.ow);
    int64_t t = i / s.ow;
    const int oh = static_cast<int>(t % s.oh);
    t /= s.oh;
    const int64_t k = t % s.k, n = t / s.k, c = k / s.multiplier;
    const float* xp = x + (n * s.c + c) * s.h * s.w;
    const float* wp = w + k * s.kh * s.kw;
    float acc = 0.f;
    for (int a = 0; a < s.kh; ++a) {
      const int ih = oh * s.sh - s.ph + a * s.dh;
      if (ih < 0 || ih >= s.h) continue;
      for (int q = 0; q < s.kw; ++q) {
        const int iw = ow * s.sw - s.pw + q * s.dw;
        if (iw < 0 || iw >= s.w) continue;
        acc += xp[static_cast<int64_t>(ih) * s.w + iw] * wp[a * s.kw + q];
      }
    }
    y[i] = b ? acc + b[k] : acc;  // the bias after the sum, as cuDNN's result plus the bias op
  }
}

// dx[n, c, ih, iw]: every tap (a, q) of every output channel of c whose output position lands on
// (ih, iw): oh * sh = ih + ph - a * dh, likewise ow.
__global__ void depthwise_backward_data_kernel(float* dx, const float* dy, const float* w, DepthwiseShape s,
                                               int64_t total, bool accumulate) {
  DPX_CUDA_LOOP(i, total) {
    const int iw = static_cast<int>(i % s.w);
    int64_t t = i / s.w;
    const int ih = static_cast<int>(t % s.h);
    t /= s.h;
    const int64_t c = t % s.c, n = t / s.c;
    float acc = 0.f;
    for (int m = 0; m < s.multiplier; ++m) {
      const int64_t k = c * s.multiplier + m;
      const float* dyp = dy + (n * s.k + k) * s.oh * s.ow;
      const float* wp = w + k * s.kh * s.kw;
      for (int a = 0; a < s.kh; ++a) {
        const int th = ih + s.ph - a * s.dh;
        if (th < 0 || th % s.sh != 0) continue;
        const int oh = th / s.sh;
        if (oh >= s.oh) continue;
        for (int q = 0; q < s.kw; ++q) {
          const int tw = iw + s.pw - q * s.dw;
          if (tw < 0 || tw % s.sw != 0) continue;
          const int ow = tw / s.sw;
          if (ow >= s.ow) continue;
          acc += dyp[static_cast<int64_t>(oh) * s.ow + ow] * wp[a * s.kw + q];
        }
      }
    }
    dx[i] = accumulate ? dx[i] + acc : acc;
  }
}

// One block per (tap, chunk): the tap (k, a, q) is blockIdx.x, the chunk of the N x OH x OW output
// positions blockIdx.y; the block's sum goes to partial[chunk, tap].
__global__ void depthwise_filter_partial_kernel(float* partial, const float* dy, const float* x, DepthwiseShape s,
                                                int64_t chunk_len) {
  __shared__ float shared[33];
  const int64_t tap = blockIdx.x, taps = gridDim.x;
  const int q = static_cast<int>(tap % s.kw), a = static_cast<int>((tap / s.kw) % s.kh);
  const int64_t k = tap / (static_cast<int64_t>(s.kw) * s.kh), c = k / s.multiplier;
  const int64_t per_image = s.oh * s.ow, count = s.n * per_image;
  const int64_t first = blockIdx.y * chunk_len, last = min(count, first + chunk_len);
  float acc = 0.f;
  for (int64_t j = first + threadIdx.x; j < last; j += blockDim.x) {
    const int64_t n = j / per_image, r = j % per_image;
    const int oh = static_cast<int>(r / s.ow), ow = static_cast<int>(r % s.ow);
    const int ih = oh * s.sh - s.ph + a * s.dh, iw = ow * s.sw - s.pw + q * s.dw;
    if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
    acc += dy[(n * s.k + k) * per_image + r] * x[(n * s.c + c) * s.h * s.w + static_cast<int64_t>(ih) * s.w + iw];
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.y * taps + tap] = acc;
}

__global__ void depthwise_filter_finish_kernel(float* dw, const float* partial, int64_t taps, int64_t chunks) {
  DPX_CUDA_LOOP(tap, taps) {
    float acc = 0.f;
    for (int64_t c = 0; c < chunks; ++c) acc += partial[c * taps + tap];
    dw[tap] += acc;
  }
}

}  // namespace

void depthwise_forward(const CudaState& st, float* y, const float* x, const float* w, const float* b,
                       const DepthwiseShape& s) {
  const int64_t total = s.n * s.k * s.oh * s.ow;
  if (total == 0) return;
  depthwise_forward_kernel<<<grid_for(total), kThreads, 0, st.stream>>>(y, x, w, b, s, total);
  check_launch();
}

void depthwise_backward_data(const CudaState& st, float* dx, const float* dy, const float* w, const DepthwiseShape& s,
                             bool accumulate) {
  const int64_t total = s.n * s.c * s.h * s.w;
  if (total == 0) return;
  depthwise_backward_data_kernel<<<grid_for(total), kThreads, 0, st.stream>>>(dx, dy, w, s, total, accumulate);
  check_launch();
}

void depthwise_backward_filter(const CudaState& st, float* dw, const float* dy, const float* x,
                               const DepthwiseShape& s) {
  const int64_t taps = s.k * s.kh * s.kw, count = s.n * s.oh * s.ow;
  if (taps == 0 || count == 0) return;
  // Chunks of at least 64 positions per thread, at most 1024 of them (grid.y <= 65535).
  const int64_t min_chunk = int64_t(kThreads) * 64;
  const int64_t chunks = std::clamp<int64_t>(count / min_chunk, 1, 1024);
  const int64_t chunk_len = (count + chunks - 1) / chunks;
  const int64_t used = (count + chunk_len - 1) / chunk_len;
  DPX_CHECK(taps <= int64_t(1) << 31, "conv2d_backward: ", taps, " depthwise weights exceed the grid");
  const Scratch partial(st, static_cast<size_t>(used * taps) * sizeof(float));
  const dim3 grid(static_cast<unsigned>(taps), static_cast<unsigned>(used));
  depthwise_filter_partial_kernel<<<grid, kThreads, 0, st.stream>>>(partial.as<float>(), dy, x, s, chunk_len);
  check_launch();
  depthwise_filter_finish_kernel<<<grid_for(taps), kThreads, 0, st.stream>>>(dw, partial.as<float>(), taps, used);
  check_launch();
}

}  // namespace dpx::cuda::detail
