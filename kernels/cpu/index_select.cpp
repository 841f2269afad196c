// CPU row gather (torch.index_select(table, 0, index): Swin's relative position bias) and its
// scatter-add backward. Indices are checked before any work; the backward splits the columns
// over threads and adds rows in index order, so repeated indices sum the same for any threads.
#include <algorithm>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

// Every entry of index in [0, R), R = table's rows (the op layer checked the shapes).
void check_rows(const char* op, const char* table_name, const Tensor& table, const Tensor& index) {
  const int64_t R = table.size(0);
  const int64_t* ip = index.data<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i)
    if (ip[i] < 0 || ip[i] >= R)
      fail(op, ": index[", i, "] = ", ip[i], " is outside the ", R, " rows of ", table_name, " ",
           shape_str(table.shape()));
}

}  // namespace

void index_select(Context& ctx, Tensor& out, const Tensor& table, const Tensor& index) {
  check_rows("index_select", "table", table, index);
  const int64_t n = index.numel(), D = table.size(1);
  const int64_t* ip = index.data<int64_t>();
  const float* t = table.data<float>();
  float* o = out.data<float>();
  int nt = threads_for(ctx, n * D);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t i = 0; i < n; ++i) std::copy(t + ip[i] * D, t + (ip[i] + 1) * D, o + i * D);
}

void index_select_backward(Context& ctx, Tensor& dtable, const Tensor& dout, const Tensor& index) {
  check_rows("index_select_backward", "dtable", dtable, index);
  const int64_t n = index.numel(), D = dtable.size(1);
  const int64_t* ip = index.data<int64_t>();
  const float* d = dout.data<float>();
  float* g = dtable.data<float>();
  // Columns are independent; within one, rows are added in index order.
  int nt = threads_for(ctx, n * D);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t j = 0; j < D; ++j)
    for (int64_t i = 0; i < n; ++i) g[ip[i] * D + j] += d[i * D + j];
}

}  // namespace dpx::cpu
