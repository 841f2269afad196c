// Concatenation along dimension 1 on CUDA (torch.cat(inputs, 1): DenseNet's feature maps) and
// its backward. Each input is one strided 2-D copy (rows = N, row = C_i * rest) on the stream;
// the backward adds each input's channels of dout into its gradient.
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;

// Elements per channel of whole (N, C, ...) (the op layer checked that the parts fit it).
int64_t per_channel(const Tensor& whole) {
  return whole.size(1) > 0 ? whole.numel() / (whole.size(0) * whole.size(1)) : 0;
}

// dst (N, run) += src rows of `pitch` elements.
__global__ void add_rows_kernel(float* dst, const float* src, int64_t rows, int64_t run, int64_t pitch) {
  DPX_CUDA_LOOP(i, rows * run) dst[i] += src[(i / run) * pitch + i % run];
}

}  // namespace

void concat_channels(Context& ctx, Tensor& out, const std::vector<Tensor>& inputs) {
  CudaState& st = state_of(ctx);
  std::vector<const Tensor*> parts;
  for (const Tensor& t : inputs) parts.push_back(&t);
  const int64_t S = per_channel(out);
  const int64_t N = out.size(0), C = out.size(1);
  char* o = static_cast<char*>(out.raw());
  int64_t first = 0;
  for (const Tensor* t : parts) {
    const size_t run = static_cast<size_t>(t->size(1) * S) * sizeof(float);
    if (run > 0 && N > 0)
      DPX_CUDA_CHECK(cudaMemcpy2DAsync(o + first * S * sizeof(float), static_cast<size_t>(C * S) * sizeof(float),
                                       t->raw(), run, run, static_cast<size_t>(N), cudaMemcpyDeviceToDevice, st.stream));
    first += t->size(1);
  }
}

void split_channels_backward(Context& ctx, const std::vector<Tensor*>& dinputs, const Tensor& dout) {
  CudaState& st = state_of(ctx);
  std::vector<const Tensor*> parts;
  for (const Tensor* t : dinputs) parts.push_back(t);
  const int64_t S = per_channel(dout);
  const int64_t N = dout.size(0), C = dout.size(1);
  const float* d = static_cast<const float*>(dout.raw());
  int64_t first = 0;
  for (Tensor* t : dinputs) {
    const int64_t run = t->size(1) * S;
    if (run > 0 && N > 0) {
      add_rows_kernel<<<detail::grid_for(N * run), detail::kThreads, 0, st.stream>>>(
          static_cast<float*>(t->raw()), d + first * S, N, run, C * S);
      check_launch();
    }
    first += t->size(1);
  }
}

}  // namespace dpx::cuda
