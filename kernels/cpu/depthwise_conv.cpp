// CPU depthwise convolution, forward and backward (dx, dW), for any stride, padding, dilation
// and channel multiplier. Each (image, input channel) plane is copied once, zero-padded, into a
// polyphase layout: the padded plane split by (row % stride_h, column % stride_w) into
// stride_h * stride_w phase planes of one pitch Wq. Kernel tap (i, j) then reads one phase plane
// at a fixed offset, so a block of output rows laid out with the same pitch is one contiguous
// multiply-add loop per tap, which GCC vectorises. The Wq - OW columns past each output row are
// computed and dropped (forward) or held at zero (dy, in backward). dx runs the same loop as a
// gather from dy into phase planes, which are then added onto the image; dW is one dot product
// per tap. Forward units are (image, input channel) planes; backward units are input channels,
// each going over the images in order, so results never depend on the number of threads.
// The dW dot products also multiply the zero dy of the pitch columns with pixels: an Inf or NaN
// pixel that no output reads then makes dW NaN, where PyTorch's stays finite.
#include "kernels/cpu/depthwise_conv.hpp"

#include <omp.h>

#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_common.hpp"

namespace dpx::cpu::detail {

namespace {

// Taps summed in one pass over a block: their source pointers and weights stay in registers.
constexpr int kMaxTaps = 9;
// Floats of destination per pass (output rows, or part of a phase plane): the block and the
// source rows it reads stay in L1 while all the taps go over it.
constexpr int64_t kBlockFloats = 2048;
// Every pass runs over whole groups of kLanes floats, so that small planes (EfficientNet's 2x2
// and 4x4) need no scalar remainder loops; the buffers carry the slack this reads and writes.
// kLanes is also the number of partial sums of each dW dot product: fixed, so the order of the
// sum does not depend on the machine's vector width.
constexpr int64_t kLanes = 16;

int64_t round_up(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// c + a * b, fused where the machine has an FMA instruction (GCC vectorises std::fma there).
inline float madd(float a, float b, float c) {
#ifdef FP_FAST_FMAF
  return std::fma(a, b, c);
#else
  return c + a * b;
#endif
}

struct Plan {
  DepthwiseShape s;
  int64_t K, taps;     // output channels C * M; kh * kw
  int64_t Hq, Wq;      // rows and pitch of a phase plane
  int64_t plane;       // Hq * Wq, rounded up to whole lane groups: phase planes lie this far apart
  int64_t phases;      // stride_h * stride_w
  int64_t lead;        // zeros in front of dy in backward's dy buffer: the largest tap offset
  int64_t block_rows;  // output rows per forward block
  std::vector<int64_t> tap_off;            // (taps): where tap (i, j) reads in the phase buffer
  std::vector<std::vector<int>> by_phase;  // the taps reading each phase plane, in tap order

  // The phase buffer, plus the lane group that passes over the last plane may read past it.
  int64_t phase_floats() const { return phases * plane + kLanes; }
  // backward's dy buffer: lead zeros, dy with pitch Wq, zeros up to one phase plane, kLanes more.
  int64_t dy_floats() const { return lead + plane + kLanes; }
};

Plan make_plan(const DepthwiseShape& s) {
  Plan p{};
  p.s = s;
  p.K = s.C * s.M, p.taps = s.kh * s.kw;
  const int64_t row_off_max = (s.kh - 1) * s.dh / s.sh, col_off_max = (s.kw - 1) * s.dw / s.sw;
  p.Wq = s.OW + col_off_max;
  // One row more than the last output row's taps reach: the pitch columns past OW of that row
  // read up to col_off_max floats further.
  p.Hq = s.OH + row_off_max + 1;
  p.plane = round_up(p.Hq * p.Wq);
  p.phases = int64_t{s.sh} * s.sw;
  p.lead = row_off_max * p.Wq + col_off_max;
  p.block_rows = std::max<int64_t>(1, kBlockFloats / p.Wq);
  p.tap_off.resize(p.taps);
  p.by_phase.resize(p.phases);
  for (int64_t i = 0; i < s.kh; ++i)
    for (int64_t j = 0; j < s.kw; ++j) {
      const int64_t q = i * s.kw + j, phase = (i * s.dh % s.sh) * s.sw + j * s.dw % s.sw;
      p.tap_off[q] = phase * p.plane + i * s.dh / s.sh * p.Wq + j * s.dw / s.sw;
      p.by_phase[phase].push_back(static_cast<int>(q));
    }
  return p;
}

// Calls fn(phase-plane row, image row, [c_lo, c_hi), column offset) for every phase-plane row
// that holds image pixels: its column c is image column c * stride_w + offset. Every other float
// of the phase planes is padding. to_phases and add_from_phases share this walk, so they agree
// on every index.
template <typename T, typename Fn>
void for_each_phase_row(const Plan& p, T* image, Fn&& fn) {
  const DepthwiseShape& s = p.s;
  for (int a = 0; a < s.sh; ++a)
    for (int b = 0; b < s.sw; ++b) {
      const int64_t phase = a * s.sw + b, col_off = b - s.pw;
      int64_t r_lo, r_hi, c_lo, c_hi;
      valid_range(s.H, p.Hq, s.sh, a - s.ph, r_lo, r_hi);
      valid_range(s.W, p.Wq, s.sw, col_off, c_lo, c_hi);
      for (int64_t r = r_lo; r < r_hi; ++r)
        fn(phase * p.plane + r * p.Wq, image + (r * s.sh + a - s.ph) * s.W, c_lo, c_hi, col_off);
    }
}

// P = the image (H, W) in phase layout. Only pixels are written: the padding floats are the
// same for every image, so P is zeroed once, when allocated.
void to_phases(const Plan& p, const float* image, float* P) {
  const int64_t sw = p.s.sw;
  for_each_phase_row(p, image,
                     [&](int64_t at, const float* row, int64_t c_lo, int64_t c_hi, int64_t off) {
                       float* dst = P + at;
                       // Constant strides for the common cases, which GCC vectorises.
                       if (sw == 1)
                         for (int64_t c = c_lo; c < c_hi; ++c) dst[c] = row[c + off];
                       else if (sw == 2)
                         for (int64_t c = c_lo; c < c_hi; ++c) dst[c] = row[2 * c + off];
                       else
                         for (int64_t c = c_lo; c < c_hi; ++c) dst[c] = row[c * sw + off];
                     });
}

// image (H, W) += the phase planes D at the pixels they hold (padding positions are dropped).
void add_from_phases(const Plan& p, const float* D, float* image) {
  const int64_t sw = p.s.sw;
  for_each_phase_row(p, image,
                     [&](int64_t at, float* row, int64_t c_lo, int64_t c_hi, int64_t off) {
                       const float* src = D + at;
                       if (sw == 1)
                         for (int64_t c = c_lo; c < c_hi; ++c) row[c + off] += src[c];
                       else if (sw == 2)
                         for (int64_t c = c_lo; c < c_hi; ++c) row[2 * c + off] += src[c];
                       else
                         for (int64_t c = c_lo; c < c_hi; ++c) row[c * sw + off] += src[c];
                     });
}

// dst[t] = (init ? *init : dst[t]) + sum_q w[q] * src[q][off + t] for t < len (a multiple of
// kLanes), the taps added in the order q = 0, 1, ... Starting from *init saves a pass that
// would fill dst first.
template <int NQ>
void add_taps_n(float* __restrict dst, int64_t len, const float* const* src, int64_t off,
                const float* w, const float* init) {
  const float* s[NQ];
  float wq[NQ];
  for (int q = 0; q < NQ; ++q) s[q] = src[q] + off, wq[q] = w[q];
  const auto pass = [&](auto start) {
    for (int64_t t = 0; t < len; t += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) {
        float acc = start(t + l);
        for (int q = 0; q < NQ; ++q) acc = madd(wq[q], s[q][t + l], acc);
        dst[t + l] = acc;
      }
  };
  if (init)
    pass([v = *init](int64_t) { return v; });
  else
    pass([dst](int64_t t) { return dst[t]; });
}

// lanes[q][l] += sum_t a[t] * src[q][t] over t = l, l + kLanes, ... < len (a multiple of
// kLanes): a dot product per tap kept as kLanes float partial sums, added into double lanes.
template <int NQ>
void dot_taps_n(double* lanes, const float* __restrict a, int64_t len, const float* const* src) {
  const float* s[NQ];
  for (int q = 0; q < NQ; ++q) s[q] = src[q];
  float acc[NQ][kLanes] = {};
  for (int64_t t = 0; t < len; t += kLanes)
#pragma GCC unroll 16  // so that acc lives in vector registers (at most kMaxTaps rows)
    for (int q = 0; q < NQ; ++q)
      for (int64_t l = 0; l < kLanes; ++l) acc[q][l] = madd(a[t + l], s[q][t + l], acc[q][l]);
  for (int q = 0; q < NQ; ++q)
    for (int64_t l = 0; l < kLanes; ++l) lanes[q * kLanes + l] += acc[q][l];
}

template <int... I>
constexpr auto add_taps_table(std::integer_sequence<int, I...>) {
  return std::array{&add_taps_n<I + 1>...};
}
template <int... I>
constexpr auto dot_taps_table(std::integer_sequence<int, I...>) {
  return std::array{&dot_taps_n<I + 1>...};
}

// add_taps_n over n >= 1 taps, kMaxTaps at a time (in tap order); init as there.
void add_taps(float* dst, int64_t len, const float* const* src, int64_t off, const float* w,
              int64_t n, const float* init) {
  static constexpr auto table = add_taps_table(std::make_integer_sequence<int, kMaxTaps>{});
  for (int64_t q = 0; q < n; q += kMaxTaps)
    table[std::min<int64_t>(kMaxTaps, n - q) - 1](dst, len, src + q, off, w + q,
                                                  q == 0 ? init : nullptr);
}

void dot_taps(double* lanes, const float* a, int64_t len, const float* const* src, int64_t n) {
  static constexpr auto table = dot_taps_table(std::make_integer_sequence<int, kMaxTaps>{});
  for (int64_t q = 0; q < n; q += kMaxTaps)
    table[std::min<int64_t>(kMaxTaps, n - q) - 1](lanes + q * kLanes, a, len, src + q);
}

// Per-thread slices of one buffer of T are this far apart: n and then at least a cache line
// (64 bytes), so that threads writing the ends of their slices never share a line.
template <typename T>
int64_t slice_stride(int64_t n) {
  constexpr int64_t line = 64 / sizeof(T);
  return (n + 2 * line - 1) / line * line;
}

// Units per scheduling chunk: a few chunks per thread, so that tiny planes do not pay a
// scheduling step each, while a core slowed by other work can still hand chunks on.
int64_t chunk_for(int64_t units, int nt) { return std::max<int64_t>(1, units / (8 * nt)); }

}  // namespace

void depthwise_conv2d_forward(const Context& ctx, float* y, const float* x, const float* w,
                              const float* b, const DepthwiseShape& s) {
  const Plan p = make_plan(s);
  const int64_t units = s.N * s.C, HW = s.H * s.W, P = s.OH * s.OW;
  const int nt = units > 1 ? threads_for(ctx, s.N * p.K * P * p.taps) : 1;
  const int64_t chunk = chunk_for(units, nt);
  const int64_t acc_floats = round_up(p.block_rows * p.Wq);
  const int64_t per_thread = slice_stride<float>(p.phase_floats() + acc_floats);
  const int64_t srcs_stride = slice_stride<const float*>(p.taps);
  // Zeros: the padding and slack of the phase buffers are never written.
  Scratch<float> scratch(nt * per_thread, /*zero=*/true);
  Scratch<const float*> srcs(nt * srcs_stride);

#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, chunk)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t n = u / s.C, c = u % s.C, tid = omp_get_thread_num();
    float* phases = scratch.data() + tid * per_thread;
    float* acc = phases + p.phase_floats();
    const float** src = srcs.data() + tid * srcs_stride;
    to_phases(p, x + u * HW, phases);
    for (int64_t q = 0; q < p.taps; ++q) src[q] = phases + p.tap_off[q];
    for (int64_t m = 0; m < s.M; ++m) {
      const int64_t k = c * s.M + m;
      float* yk = y + (n * p.K + k) * P;
      for (int64_t oh0 = 0; oh0 < s.OH; oh0 += p.block_rows) {
        const int64_t rows = std::min(p.block_rows, s.OH - oh0), len = round_up(rows * p.Wq);
        const float bias = b ? b[k] : 0.f;
        add_taps(acc, len, src, oh0 * p.Wq, w + k * p.taps, p.taps, &bias);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t ow = 0; ow < s.OW; ++ow) yk[(oh0 + r) * s.OW + ow] = acc[r * p.Wq + ow];
      }
    }
  }
}

void depthwise_conv2d_backward(const Context& ctx, float* dx, float* dw, const float* dy,
                               const float* x, const float* w, const DepthwiseShape& s) {
  if ((!dx && !dw) || s.N == 0) return;
  const Plan p = make_plan(s);
  const int64_t HW = s.H * s.W, P = s.OH * s.OW;
  // One unit per input channel, looping over the images in order: dW of its output channels is
  // then summed in one fixed order, in lanes that are reduced once, with no partial buffers.
  const int64_t units = s.C;
  const int nt = units > 1 ? threads_for(ctx, 2 * s.N * p.K * P * p.taps) : 1;
  const int64_t chunk = chunk_for(units, nt);
  // Rows of dy with pitch Wq, in whole lane groups (the dy buffer is zero past dy).
  const int64_t dot_len = round_up(s.OH * p.Wq);
  const int64_t x_floats = dw ? p.phase_floats() : 0, dx_floats = dx ? p.phases * p.plane : 0;
  const int64_t per_thread = slice_stride<float>(x_floats + dx_floats + p.dy_floats() + p.taps);
  const int64_t srcs_stride = slice_stride<const float*>(p.taps);
  const int64_t lane_doubles = dw ? s.M * p.taps * kLanes : 0;
  const int64_t lanes_stride = slice_stride<double>(lane_doubles);
  // Zeros: the padding and slack of the phase buffers and of the dy buffer are never written.
  Scratch<float> scratch(nt * per_thread, /*zero=*/true);
  Scratch<const float*> srcs(nt * srcs_stride);
  Scratch<double> lanes(nt * lanes_stride);  // each unit zeroes its lanes before summing

#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, chunk)
  for (int64_t c = 0; c < units; ++c) {
    const int64_t tid = omp_get_thread_num();
    float* xq = scratch.data() + tid * per_thread;  // x in phase layout (for dW)
    float* dxq = xq + x_floats;                     // dx in phase layout
    float* dyq = dxq + dx_floats;                   // dy with pitch Wq, after `lead` zeros
    float* wq = dyq + p.dy_floats();                // the weights of one phase's taps
    const float** src = srcs.data() + tid * srcs_stride;
    double* dw_lanes = lanes.data() + tid * lanes_stride;  // (M, taps, kLanes)
    std::fill(dw_lanes, dw_lanes + lane_doubles, 0.0);
    for (int64_t n = 0; n < s.N; ++n) {
      if (dw) to_phases(p, x + (n * s.C + c) * HW, xq);
      for (int64_t m = 0; m < s.M; ++m) {
        const int64_t k = c * s.M + m;
        const float* dyk = dy + (n * p.K + k) * P;
        for (int64_t oh = 0; oh < s.OH; ++oh)
          for (int64_t ow = 0; ow < s.OW; ++ow) dyq[p.lead + oh * p.Wq + ow] = dyk[oh * s.OW + ow];
        if (dw) {
          for (int64_t q = 0; q < p.taps; ++q) src[q] = xq + p.tap_off[q];
          dot_taps(dw_lanes + m * p.taps * kLanes, dyq + p.lead, dot_len, src, p.taps);
        }
        if (dx) {
          // dx at phase-plane float v gets w[q] * dy at v - (tap q's offset in its plane). The
          // first output channel (m == 0) overwrites what the previous image left there; planes
          // that no tap reaches are never written, so they stay 0.
          const float zero = 0.f;
          for (int64_t phase = 0; phase < p.phases; ++phase) {
            const std::vector<int>& taps = p.by_phase[phase];
            if (taps.empty()) continue;
            for (size_t e = 0; e < taps.size(); ++e) {
              src[e] = dyq + p.lead - (p.tap_off[taps[e]] - phase * p.plane);
              wq[e] = w[k * p.taps + taps[e]];
            }
            float* dst = dxq + phase * p.plane;
            const auto n_taps = static_cast<int64_t>(taps.size());
            for (int64_t v = 0; v < p.plane; v += kBlockFloats)
              add_taps(dst + v, std::min(kBlockFloats, p.plane - v), src, v, wq, n_taps,
                       m == 0 ? &zero : nullptr);
          }
        }
      }
      if (dx) add_from_phases(p, dxq, dx + (n * s.C + c) * HW);
    }
    if (dw)
      for (int64_t e = 0; e < s.M * p.taps; ++e) {  // dW of output channels c * M ... in order
        double sum = 0;
        for (int64_t l = 0; l < kLanes; ++l) sum += dw_lanes[e * kLanes + l];
        dw[c * s.M * p.taps + e] += static_cast<float>(sum);
      }
  }
}

}  // namespace dpx::cpu::detail
