// CPU softmax cross-entropy (mean over the batch, PyTorch's label smoothing) and the count of
// correct arg-max predictions. Rows are independent; the batch mean is summed in row order.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

// Every label in [0, C) for logits (N, C) (the op layer checked the shapes): checked before any
// parallel region, so a bad label is a clear error rather than a wild read.
void check_labels(const char* op, const Tensor& logits, const Tensor& labels) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* l = labels.data<int64_t>();
  for (int64_t i = 0; i < N; ++i)
    if (l[i] < 0 || l[i] >= C)
      fail(op, ": label ", l[i], " (row ", i, ") is out of range for ", C,
           " classes; labels must lie in [0, ", C, ")");
}

}  // namespace

void cross_entropy_forward(Context& ctx, Tensor& loss, Tensor& probs, const Tensor& logits,
                           const Tensor& labels, float label_smoothing) {
  const char* op = "cross_entropy_forward";
  check_labels(op, logits, labels);
  const int64_t N = logits.size(0), C = logits.size(1);

  const float* z = logits.data<float>();
  float* pr = probs.data<float>();
  const int64_t* lab = labels.data<int64_t>();
  const double eps = label_smoothing;
  Scratch<double> row_loss(N);
  int nt = threads_for(ctx, N * C);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t n = 0; n < N; ++n) {
    const float* zr = z + n * C;
    float* pr_row = pr + n * C;
    // log-sum-exp around the row maximum, so exp never overflows.
    float mx = zr[0];
    for (int64_t c = 1; c < C; ++c) mx = zr[c] > mx ? zr[c] : mx;
    // Exponentials in float (each within an ulp), their sum and the loss terms in double.
    double sum = 0, zsum = 0;
    for (int64_t c = 0; c < C; ++c) {
      sum += std::exp(zr[c] - mx);
      zsum += zr[c];
    }
    const double lse = mx + std::log(sum);
    const float inv_sum = static_cast<float>(1.0 / sum);
    for (int64_t c = 0; c < C; ++c) pr_row[c] = std::exp(zr[c] - mx) * inv_sum;
    // -log p_c = lse - z_c; smoothing mixes the label's term with the mean over all classes.
    row_loss[n] = (1 - eps) * (lse - zr[lab[n]]) + eps * (lse - zsum / C);
  }
  double total = 0;
  for (int64_t n = 0; n < N; ++n) total += row_loss[n];
  loss.data<float>()[0] = static_cast<float>(total / N);
}

void cross_entropy_backward(Context& ctx, Tensor& dlogits, const Tensor& probs,
                            const Tensor& labels, float label_smoothing, float scale) {
  const char* op = "cross_entropy_backward";
  check_labels(op, probs, labels);
  const int64_t N = probs.size(0), C = probs.size(1);
  if (N == 0 || C == 0) return;
  const float* p = probs.data<float>();
  float* d = dlogits.data<float>();
  const int64_t* lab = labels.data<int64_t>();
  // d(mean loss)/dz_c = (p_c - (1-eps) [c == y] - eps / C) / N
  const float g = scale / static_cast<float>(N);
  const float off = label_smoothing / static_cast<float>(C);
  const float on = 1.f - label_smoothing;
  int nt = threads_for(ctx, N * C);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t n = 0; n < N; ++n) {
    const float* pr = p + n * C;
    float* dr = d + n * C;
    for (int64_t c = 0; c < C; ++c) dr[c] += g * (pr[c] - off - (c == lab[n] ? on : 0.f));
  }
}

int64_t count_correct(Context& ctx, const Tensor& logits, const Tensor& labels) {
  const char* op = "count_correct";
  check_labels(op, logits, labels);
  const int64_t N = logits.size(0), C = logits.size(1);
  if (C == 0) return 0;
  const float* z = logits.data<float>();
  const int64_t* lab = labels.data<int64_t>();
  int64_t correct = 0;
  int nt = threads_for(ctx, N * C);
  // Integer counts add up the same in any order, so a reduction is safe here.
#pragma omp parallel for num_threads(nt) if (nt > 1) reduction(+ : correct)
  for (int64_t n = 0; n < N; ++n) {
    const float* zr = z + n * C;
    int64_t best = 0;  // first maximum wins, as torch.argmax
    for (int64_t c = 1; c < C; ++c)
      if (zr[c] > zr[best]) best = c;
    correct += best == lab[n] ? 1 : 0;
  }
  return correct;
}

}  // namespace dpx::cpu
