// Reference matrix products as triple loops: linear forward/backward (y = x W^T + b) and
// batched matmul. Every dot product is summed in double and rounded once to f32.
#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

// x (N, in), w (out, in), b (out) or null, y (N, out):  y[n][o] = b[o] + sum_i x[n][i] w[o][i].
void linear_forward(Context&, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b) {
  const int64_t N = x.size(0), in = x.size(1), out = w.size(0);
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const float* bp = b && b->defined() ? b->data<float>() : nullptr;
  float* yp = y.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double sum = bp ? bp[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) sum += static_cast<double>(xp[n * in + i]) * wp[o * in + i];
      yp[n * out + o] = static_cast<float>(sum);
    }
}

// dx[n][i] (+)= sum_o dy[n][o] w[o][i];  dw[o][i] += sum_n dy[n][o] x[n][i];  db[o] += sum_n dy[n][o].
void linear_backward(Context&, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                     const Tensor& x, const Tensor& w, DxMode dx_mode) {
  const int64_t N = x.size(0), in = x.size(1), out = w.size(0);
  const float* dyp = dy.data<float>();
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  if (dx) {
    float* d = dx->data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < in; ++i) {
        double sum = 0;
        for (int64_t o = 0; o < out; ++o) sum += static_cast<double>(dyp[n * out + o]) * wp[o * in + i];
        const auto v = static_cast<float>(sum);
        d[n * in + i] = dx_mode == DxMode::overwrite ? v : d[n * in + i] + v;
      }
  }
  if (dw) {
    float* d = dw->data<float>();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double sum = 0;
        for (int64_t n = 0; n < N; ++n) sum += static_cast<double>(dyp[n * out + o]) * xp[n * in + i];
        d[o * in + i] += static_cast<float>(sum);
      }
  }
  if (db) {
    float* d = db->data<float>();
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (int64_t n = 0; n < N; ++n) sum += dyp[n * out + o];
      d[o] += static_cast<float>(sum);
    }
  }
}

// c = alpha * op(a) op(b) + beta * c for each of the `batch` matrices (all leading dimensions
// flattened). op(a) is (M, K): a is stored (M, K), or (K, M) when trans_a. op(b) is (K, N): b is
// stored (K, N), or (N, K) when trans_b. beta == 0 does not read c (it may hold garbage).
void matmul(Context&, Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
            float alpha, float beta) {
  const int64_t M = c.size(-2), N = c.size(-1);
  const int64_t K = trans_a ? a.size(-2) : a.size(-1);
  const int64_t batch = M * N > 0 ? c.numel() / (M * N) : 0;
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* cp = c.data<float>();
  for (int64_t t = 0; t < batch; ++t) {
    const float* A = ap + t * M * K;
    const float* B = bp + t * K * N;
    float* C = cp + t * M * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k) {
          const float a_mk = trans_a ? A[k * M + m] : A[m * K + k];
          const float b_kn = trans_b ? B[n * K + k] : B[k * N + n];
          sum += static_cast<double>(a_mk) * b_kn;
        }
        const double old = beta == 0.f ? 0.0 : static_cast<double>(beta) * C[m * N + n];
        C[m * N + n] = static_cast<float>(alpha * sum + old);
      }
  }
}

}  // namespace dpx::ref
