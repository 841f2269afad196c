// Reference ReLU and dropout, forward and backward. Dropout's keep bit for element i is drawn
// from Rng(seed, stream) counter i, exactly as the CPU and CUDA kernels draw it.
#include "core/rng.hpp"
#include "kernels/host_half.hpp"
#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

// y = max(x, 0); written `x < 0 ? 0 : x` so that NaN passes through (as torch.relu).
void relu_forward(Context&, Tensor& y, const Tensor& x) {
  float* yp = y.data<float>();
  const float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) yp[i] = xp[i] < 0.f ? 0.f : xp[i];
}

// dx += dy where the output was positive (the slope of ReLU is 1 there, 0 elsewhere).
void relu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode dx_mode) {
  if (kernels::is_half(y) || kernels::is_half(dx) || kernels::is_half(dy))
    return kernels::relu_backward_widened(relu_backward, ctx, dx, dy, y, dx_mode);
  float* dxp = dx.data<float>();
  const float* dyp = dy.data<float>();
  const float* yp = y.data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (dx_mode == DxMode::overwrite) dxp[i] = 0.f;
    if (yp[i] > 0.f) dxp[i] += dyp[i];
  }
}

namespace {
// Kept values are scaled by 1/(1-p) so the expected output equals x; with p == 1 nothing is
// kept and the scale is 0 (not infinity).
float keep_scale(float p) { return p < 1.f ? 1.f / (1.f - p) : 0.f; }
}  // namespace

void dropout_forward(Context& ctx, Tensor& y, Tensor& mask, const Tensor& x, float p, uint64_t seed,
                     uint64_t stream) {
  const Rng rng(seed, stream + host_random_offset(ctx));
  const float s = keep_scale(p);
  float* yp = y.data<float>();
  uint8_t* mp = mask.data<uint8_t>();
  const float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    // u uniform in [0, 1): keep with probability 1 - p. (p == 0 keeps everything.)
    const float u = rng.uniform_at(static_cast<uint64_t>(i));
    const bool keep = u >= p;
    mp[i] = keep ? 1 : 0;
    yp[i] = keep ? xp[i] * s : 0.f;
  }
}

// out[i] = 1/keep when draw i falls below keep, else 0.
void bernoulli_scale(Context& ctx, Tensor& out, float keep, uint64_t seed, uint64_t stream) {
  const Rng rng(seed, stream + host_random_offset(ctx));
  const float kept = keep > 0.f ? 1.f / keep : 0.f;
  float* o = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = rng.uniform_at(static_cast<uint64_t>(i)) < keep ? kept : 0.f;
}

// dx += dy * mask / (1 - p)
void dropout_backward(Context&, Tensor& dx, const Tensor& dy, const Tensor& mask, float p) {
  const float s = keep_scale(p);
  float* dxp = dx.data<float>();
  const float* dyp = dy.data<float>();
  const uint8_t* mp = mask.data<uint8_t>();
  for (int64_t i = 0; i < dy.numel(); ++i)
    if (mp[i]) dxp[i] += dyp[i] * s;
}

}  // namespace dpx::ref
