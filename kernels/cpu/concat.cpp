// CPU concatenation along dimension 1 (torch.cat(inputs, 1): a Fire module's two branches) and
// its backward, which hands each input its own channels of the gradient, and copy_channels, a
// block of channels from one tensor into another (DenseNet's block buffer). Every (n, input)
// block is one contiguous run, copied by one thread.
#include <algorithm>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

// Elements per channel of whole (N, C, ...): the product of the dimensions after C.
int64_t per_channel(const Tensor& whole) {
  int64_t S = 1;
  for (int d = 2; d < whole.dim(); ++d) S *= whole.size(d);
  return S;
}

}  // namespace

void concat_channels(Context& ctx, Tensor& out, const std::vector<Tensor>& inputs) {
  std::vector<const Tensor*> parts;
  for (const Tensor& t : inputs) parts.push_back(&t);
  const int64_t S = per_channel(out);
  const int64_t N = out.size(0), C = out.size(1), P = static_cast<int64_t>(parts.size());
  std::vector<int64_t> first(parts.size());  // first channel of each input in out
  for (int64_t i = 0, c = 0; i < P; c += parts[i]->size(1), ++i) first[i] = c;
  float* o = out.data<float>();
  int nt = threads_for(ctx, out.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1) collapse(2)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < P; ++i) {
      const int64_t run = parts[i]->size(1) * S;
      const float* src = parts[i]->data<float>() + n * run;
      std::copy(src, src + run, o + (n * C + first[i]) * S);
    }
}

void split_channels_backward(Context& ctx, const std::vector<Tensor*>& dinputs, const Tensor& dout) {
  const std::vector<Tensor*>& parts = dinputs;
  const int64_t S = per_channel(dout);
  const int64_t N = dout.size(0), C = dout.size(1), P = static_cast<int64_t>(parts.size());
  std::vector<int64_t> first(parts.size());
  for (int64_t i = 0, c = 0; i < P; c += parts[i]->size(1), ++i) first[i] = c;
  const float* d = dout.data<float>();
  int nt = threads_for(ctx, dout.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1) collapse(2)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < P; ++i) {
      const int64_t run = parts[i]->size(1) * S;
      const float* src = d + (n * C + first[i]) * S;
      float* dst = dinputs[i]->data<float>() + n * run;
      for (int64_t k = 0; k < run; ++k) dst[k] += src[k];
    }
}

void copy_channels(Context& ctx, Tensor& dst, int64_t dst_channel, const Tensor& src, int64_t src_channel,
                   int64_t channels, DxMode mode) {
  const int64_t N = dst.size(0), S = per_channel(dst), run = channels * S;
  if (N == 0 || run == 0) return;
  const int64_t dst_image = dst.size(1) * S, src_image = src.size(1) * S;
  float* d = dst.data<float>() + dst_channel * S;
  const float* x = src.data<float>() + src_channel * S;
  int nt = threads_for(ctx, N * run);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t n = 0; n < N; ++n) {
    float* to = d + n * dst_image;
    const float* from = x + n * src_image;
    if (mode == DxMode::overwrite)
      std::copy(from, from + run, to);
    else
      for (int64_t k = 0; k < run; ++k) to[k] += from[k];
  }
}

}  // namespace dpx::cpu
