// CPU activations and regularisation: ReLU and dropout, forward and backward.
// Dropout draws element i's keep bit from Philox counter i, so the mask is the same for any
// number of threads (and the same as the CUDA kernel draws).
#include "core/rng.hpp"
#include "kernels/cpu/cpu_common.hpp"
#include "kernels/host_half.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

void relu_forward(Context& ctx, Tensor& y, const Tensor& x) {
  relu_into(ctx, y.data<float>(), x.data<float>(), x.numel());  // NaN passes, as torch.relu
}

void relu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode dx_mode) {
  if (kernels::is_half(y) || kernels::is_half(dx) || kernels::is_half(dy))
    return kernels::relu_backward_widened(relu_backward, ctx, dx, dy, y, dx_mode);
  float* dxp = dx.data<float>();
  const float *dyp = dy.data<float>(), *yp = y.data<float>();
  const int64_t n = y.numel();
  int nt = threads_for(ctx, n);
  if (dx_mode == DxMode::overwrite) {
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < n; ++i) dxp[i] = yp[i] > 0.f ? dyp[i] : 0.f;
    return;
  }
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) dxp[i] += yp[i] > 0.f ? dyp[i] : 0.f;
}

namespace {
// 1/(1-p), or 0 when everything is dropped (p == 1), so dropped and kept alike become 0.
float keep_scale(float p) { return p < 1.f ? 1.f / (1.f - p) : 0.f; }
}  // namespace

void dropout_forward(Context& ctx, Tensor& y, Tensor& mask, const Tensor& x, float p, uint64_t seed,
                     uint64_t stream) {
  float* yp = y.data<float>();
  uint8_t* mp = mask.data<uint8_t>();
  const float* xp = x.data<float>();
  const int64_t n = x.numel();
  int nt = threads_for(ctx, n);
  if (p == 0.f) {
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t i = 0; i < n; ++i) {
      yp[i] = xp[i];
      mp[i] = 1;
    }
    return;
  }
  const Rng rng(seed, stream + host_random_offset(ctx));
  const float s = keep_scale(p);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = rng.uniform_at(static_cast<uint64_t>(i)) >= p;
    mp[i] = keep ? 1 : 0;
    yp[i] = keep ? xp[i] * s : 0.f;
  }
}

void bernoulli_scale(Context& ctx, Tensor& out, float keep, uint64_t seed, uint64_t stream) {
  const Rng rng(seed, stream + host_random_offset(ctx));
  const float kept = keep > 0.f ? 1.f / keep : 0.f;
  float* o = out.data<float>();
  const int64_t n = out.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) o[i] = rng.uniform_at(static_cast<uint64_t>(i)) < keep ? kept : 0.f;
}

void dropout_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& mask, float p) {
  float* dxp = dx.data<float>();
  const float* dyp = dy.data<float>();
  const uint8_t* mp = mask.data<uint8_t>();
  const float s = keep_scale(p);
  const int64_t n = dy.numel();
  int nt = threads_for(ctx, n);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) dxp[i] += mp[i] ? dyp[i] * s : 0.f;
}

}  // namespace dpx::cpu
