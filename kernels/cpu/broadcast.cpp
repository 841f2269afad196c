// CPU broadcasting elementwise ops: out = a + b, out = a * b, and their backward (sums over the
// broadcast dimensions). Every output or gradient element is computed by one thread, summing in
// a fixed order in double, so results do not depend on the thread count.
#include <algorithm>
#include <initializer_list>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/layout_plan.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

constexpr int kMaxDims = ops::plan::kMaxBroadcastDims;
constexpr int kMaxOperands = ops::plan::kMaxOperands;
using Layout = ops::plan::BroadcastLayout;

Layout make_layout(const Shape& out, std::initializer_list<const Shape*> operands) {
  return ops::plan::broadcast_layout(out, operands);
}

// Offsets of every operand at the row-major index `i` over the dimensions listed in `dims`.
void add_offsets(const Layout& L, const int* dims, int count, int64_t i, int64_t* off) {
  for (int c = count - 1; c >= 0; --c) {
    const int d = dims[c];
    const int64_t coord = i % L.size[d];
    i /= L.size[d];
    for (int k = 0; k < L.operands; ++k) off[k] += coord * L.stride[k][d];
  }
}

// out = f(a, b) elementwise with broadcasting: rows of out's last merged dimension.
template <class F>
void broadcast_binary(const Context& ctx, Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const Layout L = make_layout(out.shape(), {&out.shape(), &a.shape(), &b.shape()});
  if (L.numel == 0) return;
  int outer_dims[kMaxDims];
  for (int d = 0; d + 1 < L.dims; ++d) outer_dims[d] = d;
  const int64_t inner = L.size[L.dims - 1], rows = L.numel / inner;
  const int64_t sa = L.stride[1][L.dims - 1], sb = L.stride[2][L.dims - 1];
  float* outp = out.data<float>();
  const float *ap = a.data<float>(), *bp = b.data<float>();
  int nt = threads_for(ctx, L.numel);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off[kMaxOperands] = {};
    add_offsets(L, outer_dims, L.dims - 1, r, off);
    float* o = outp + off[0];
    const float *x = ap + off[1], *y = bp + off[2];
    for (int64_t i = 0; i < inner; ++i) o[i] = f(x[i * sa], y[i * sb]);
  }
}

// dt += dy (times `other`, when given) summed over the dimensions t was broadcast along.
// Each element of t is one task: its kept coordinates, then a loop over the reduced ones.
void reduce_to(const Context& ctx, Tensor& dt, const Tensor& dy, const Tensor* other) {
  if (dy.numel() == 0 || dt.numel() == 0) return;  // an empty sum adds nothing
  const Shape& out = dy.shape();
  const Layout L =
      other ? make_layout(out, {&out, &dt.shape(), &other->shape()}) : make_layout(out, {&out, &dt.shape()});
  int kept[kMaxDims], reduced[kMaxDims], nk = 0, nr = 0;
  for (int d = 0; d < L.dims; ++d) (L.full[1][d] ? kept[nk++] : reduced[nr++]) = d;
  float* tp = dt.data<float>();
  const float* dyp = dy.data<float>();
  const float* wp = other ? other->data<float>() : nullptr;
  if (nr == 0) {
    // Nothing to sum (dt has dy's shape: the gradient of the full-size factor, such as x in
    // squeeze-excitation's x * s): rows along the last dimension, as broadcast_binary.
    int outer_dims[kMaxDims];
    for (int d = 0; d + 1 < L.dims; ++d) outer_dims[d] = d;
    const int64_t inner = L.size[L.dims - 1], rows = L.numel / inner;
    const int64_t s_dy = L.stride[0][L.dims - 1], s_t = L.stride[1][L.dims - 1];
    const int64_t s_o = other ? L.stride[2][L.dims - 1] : 0;
    const int nt = threads_for(ctx, L.numel);
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t off[kMaxOperands] = {};
      add_offsets(L, outer_dims, L.dims - 1, r, off);
      const float* g = dyp + off[0];
      float* t = tp + off[1];
      if (wp) {
        const float* w = wp + off[2];
        for (int64_t i = 0; i < inner; ++i) t[i * s_t] += g[i * s_dy] * w[i * s_o];
      } else {
        for (int64_t i = 0; i < inner; ++i) t[i * s_t] += g[i * s_dy];
      }
    }
    return;
  }
  const int64_t targets = dt.numel();
  // The innermost reduced dimension is the loop the work happens in.
  const int last = nr > 0 ? reduced[nr - 1] : -1;
  const int64_t inner = last >= 0 ? L.size[last] : 1;
  const int64_t s_dy = last >= 0 ? L.stride[0][last] : 0;
  const int64_t s_o = last >= 0 && other ? L.stride[2][last] : 0;
  const int64_t outer = L.numel / (targets * inner);
  int nt = threads_for(ctx, L.numel);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t j = 0; j < targets; ++j) {
    int64_t base[kMaxOperands] = {};
    add_offsets(L, kept, nk, j, base);
    LaneSum sum;
    for (int64_t r = 0; r < outer; ++r) {
      int64_t off[kMaxOperands] = {base[0], base[1], base[2]};
      add_offsets(L, reduced, nr - 1, r, off);
      const float* g = dyp + off[0];
      const float* w = wp ? wp + off[2] : nullptr;
      // (Contiguous rows, the common case, in loops the compiler can vectorise.)
      if (w && s_dy == 1 && s_o == 1)
        sum.add(inner, [g, w](int64_t i) { return static_cast<double>(g[i]) * w[i]; });
      else if (w)
        sum.add(inner, [=](int64_t i) { return static_cast<double>(g[i * s_dy]) * w[i * s_o]; });
      else if (s_dy == 1)
        sum.add(inner, [g](int64_t i) { return static_cast<double>(g[i]); });
      else
        sum.add(inner, [=](int64_t i) { return static_cast<double>(g[i * s_dy]); });
    }
    tp[j] += static_cast<float>(sum.total());
  }
}

}  // namespace

void add_broadcast(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  broadcast_binary(ctx, out, a, b, [](float x, float y) { return x + y; });
}

void mul_broadcast(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  broadcast_binary(ctx, out, a, b, [](float x, float y) { return x * y; });
}

void add_broadcast_backward(Context& ctx, Tensor* da, Tensor* db, const Tensor& dy) {
  if (da) reduce_to(ctx, *da, dy, nullptr);
  if (db) reduce_to(ctx, *db, dy, nullptr);
}

void mul_broadcast_backward(Context& ctx, Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                            const Tensor& b) {
  if (da) reduce_to(ctx, *da, dy, &b);
  if (db) reduce_to(ctx, *db, dy, &a);
}

}  // namespace dpx::cpu
