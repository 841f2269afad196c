// Reference broadcasting add and multiply and their backward, coordinate by coordinate:
// each operand has out's number of dimensions, each equal to out's or 1 (then broadcast).
#include <vector>

#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

namespace {

// The flat index in t of out's element `i` (row-major over out's shape): take out's
// coordinates and use 0 along every dimension where t has size 1.
int64_t broadcast_index(const Shape& out, const Shape& t, int64_t i) {
  int64_t index = 0, stride = 1;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    const int64_t coord = i % out[d];
    i /= out[d];
    if (t[d] != 1) index += coord * stride;
    stride *= t[d];
  }
  return index;
}

// dt += sum over out's elements i of dy[i] (times other[i's index in other], when given),
// each added to t's element that i was broadcast from.
void reduce_into(Tensor& dt, const Tensor& dy, const Tensor* other) {
  std::vector<double> acc(static_cast<size_t>(dt.numel()), 0.0);
  const float* dyp = dy.data<float>();
  for (int64_t i = 0; i < dy.numel(); ++i) {
    double g = dyp[i];
    if (other) g *= other->data<float>()[broadcast_index(dy.shape(), other->shape(), i)];
    acc[broadcast_index(dy.shape(), dt.shape(), i)] += g;
  }
  float* d = dt.data<float>();
  for (int64_t j = 0; j < dt.numel(); ++j) d[j] += static_cast<float>(acc[j]);
}

}  // namespace

// out[i] = a[i's index in a] + b[i's index in b]
void add_broadcast(Context&, Tensor& out, const Tensor& a, const Tensor& b) {
  float* o = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i)
    o[i] = a.data<float>()[broadcast_index(out.shape(), a.shape(), i)] +
           b.data<float>()[broadcast_index(out.shape(), b.shape(), i)];
}

// da += dy summed over a's broadcast dimensions; likewise db.
void add_broadcast_backward(Context&, Tensor* da, Tensor* db, const Tensor& dy) {
  if (da) reduce_into(*da, dy, nullptr);
  if (db) reduce_into(*db, dy, nullptr);
}

// out[i] = a[i's index in a] * b[i's index in b]
void mul_broadcast(Context&, Tensor& out, const Tensor& a, const Tensor& b) {
  float* o = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i)
    o[i] = a.data<float>()[broadcast_index(out.shape(), a.shape(), i)] *
           b.data<float>()[broadcast_index(out.shape(), b.shape(), i)];
}

// d(a * b)/da = b: da += dy * b summed over a's broadcast dimensions; db += dy * a over b's.
void mul_broadcast_backward(Context&, Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                            const Tensor& b) {
  if (da) reduce_into(*da, dy, &b);
  if (db) reduce_into(*db, dy, &a);
}

}  // namespace dpx::ref
