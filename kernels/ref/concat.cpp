// Reference concatenation along dimension 1 (torch.cat(inputs, 1)) and its backward, which
// hands each input the gradient of its own channels; copy_channels, a block of channels from
// one tensor into another.
#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

namespace {
// Elements per channel: the product of the dimensions after 1.
int64_t per_channel(const Tensor& t) {
  int64_t S = 1;
  for (int d = 2; d < t.dim(); ++d) S *= t.size(d);
  return S;
}
}  // namespace

// out[n][first_i + c][s] = inputs[i][n][c][s], where first_i is the number of channels of
// the inputs before input i.
void concat_channels(Context&, Tensor& out, const std::vector<Tensor>& inputs) {
  const int64_t N = out.size(0), C = out.size(1), S = per_channel(out);
  float* o = out.data<float>();
  int64_t first = 0;
  for (const Tensor& in : inputs) {
    const int64_t Ci = in.size(1);
    const float* x = in.data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < Ci; ++c)
        for (int64_t s = 0; s < S; ++s) o[(n * C + first + c) * S + s] = x[(n * Ci + c) * S + s];
    first += Ci;
  }
}

// dinputs[i][n][c][s] += dout[n][first_i + c][s]
void split_channels_backward(Context&, const std::vector<Tensor*>& dinputs, const Tensor& dout) {
  const int64_t N = dout.size(0), C = dout.size(1), S = per_channel(dout);
  const float* d = dout.data<float>();
  int64_t first = 0;
  for (Tensor* din : dinputs) {
    const int64_t Ci = din->size(1);
    float* g = din->data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < Ci; ++c)
        for (int64_t s = 0; s < S; ++s) g[(n * Ci + c) * S + s] += d[(n * C + first + c) * S + s];
    first += Ci;
  }
}

// dst[n][dst_channel + c][s] (+)= src[n][src_channel + c][s] for c < channels
void copy_channels(Context&, Tensor& dst, int64_t dst_channel, const Tensor& src, int64_t src_channel,
                   int64_t channels, DxMode mode) {
  const int64_t N = dst.size(0), Cd = dst.size(1), Cs = src.size(1), S = per_channel(dst);
  float* d = dst.data<float>();
  const float* x = src.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t s = 0; s < S; ++s) {
        float& to = d[(n * Cd + dst_channel + c) * S + s];
        const float from = x[(n * Cs + src_channel + c) * S + s];
        to = mode == DxMode::overwrite ? from : to + from;
      }
}

}  // namespace dpx::ref
