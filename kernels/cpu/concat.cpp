// CPU concatenation along dimension 1 (torch.cat(inputs, 1): DenseNet's growing feature maps)
// and its backward, which hands each input its own channels of the gradient. Every (n, input)
// block is one contiguous run, copied by one thread.
#include <algorithm>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

// Elements per channel of whole (N, C, ...): the product of the dimensions after C.
int64_t per_channel(const Tensor& whole) {
  return whole.size(1) > 0 ? whole.numel() / (whole.size(0) * whole.size(1)) : 0;
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

}  // namespace dpx::cpu
