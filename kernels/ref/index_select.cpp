// Reference row gather (torch.index_select(table, 0, index)) and its scatter-add backward,
// where repeated indices add up.
#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

// out[i][j] = table[index[i]][j]
void index_select(Context&, Tensor& out, const Tensor& table, const Tensor& index) {
  const int64_t n = index.numel(), D = table.size(1);
  const int64_t* idx = index.data<int64_t>();
  const float* t = table.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < D; ++j) o[i * D + j] = t[idx[i] * D + j];
}

// dtable[index[i]][j] += dout[i][j], in order of i.
void index_select_backward(Context&, Tensor& dtable, const Tensor& dout, const Tensor& index) {
  const int64_t n = index.numel(), D = dtable.size(1);
  const int64_t* idx = index.data<int64_t>();
  const float* d = dout.data<float>();
  float* g = dtable.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < D; ++j) g[idx[i] * D + j] += d[i * D + j];
}

}  // namespace dpx::ref
