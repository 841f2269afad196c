// Reference softmax cross-entropy (mean over the batch, PyTorch's label smoothing), its
// backward, and the count of rows whose arg-max is the label.
#include <cmath>

#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

// logits z (N, C), labels y (N). Per row: p = softmax(z), -log p_c = lse - z_c with
// lse = log sum_c exp(z_c). Label smoothing eps takes the target (1 - eps) one-hot(y) + eps / C:
//   loss_n = (1 - eps) (lse - z_y) + eps * mean_c (lse - z_c);  loss = mean_n loss_n.
void cross_entropy_forward(Context&, Tensor& loss, Tensor& probs, const Tensor& logits,
                           const Tensor& labels, float label_smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const float* z = logits.data<float>();
  const int64_t* y = labels.data<int64_t>();
  float* p = probs.data<float>();
  const double eps = label_smoothing;
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const float* zr = z + n * C;
    double mx = zr[0];
    for (int64_t c = 1; c < C; ++c) mx = zr[c] > mx ? zr[c] : mx;
    double sum = 0, zsum = 0;
    for (int64_t c = 0; c < C; ++c) {
      sum += std::exp(zr[c] - mx);
      zsum += zr[c];
    }
    const double lse = mx + std::log(sum);
    for (int64_t c = 0; c < C; ++c) p[n * C + c] = static_cast<float>(std::exp(zr[c] - mx) / sum);
    total += (1 - eps) * (lse - zr[y[n]]) + eps * (lse - zsum / C);
  }
  loss.data<float>()[0] = static_cast<float>(total / N);
}

// d loss / d z_c = (p_c - target_c) / N with target_c = (1 - eps) [c == y] + eps / C;
// dlogits += scale times that.
void cross_entropy_backward(Context&, Tensor& dlogits, const Tensor& probs, const Tensor& labels,
                            float label_smoothing, float scale) {
  const int64_t N = probs.size(0), C = probs.size(1);
  const float* p = probs.data<float>();
  const int64_t* y = labels.data<int64_t>();
  float* d = dlogits.data<float>();
  const double eps = label_smoothing;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const double target = (c == y[n] ? 1 - eps : 0.0) + eps / C;
      d[n * C + c] += static_cast<float>(scale * (p[n * C + c] - target) / N);
    }
}

// Rows whose arg-max (the first maximum, as torch.argmax) equals the label.
int64_t count_correct(Context&, const Tensor& logits, const Tensor& labels) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (C == 0) return 0;
  const float* z = logits.data<float>();
  const int64_t* y = labels.data<int64_t>();
  int64_t correct = 0;
  for (int64_t n = 0; n < N; ++n) {
    int64_t best = 0;
    for (int64_t c = 1; c < C; ++c)
      if (z[n * C + c] > z[n * C + best]) best = c;
    if (best == y[n]) ++correct;
  }
  return correct;
}

}  // namespace dpx::ref
