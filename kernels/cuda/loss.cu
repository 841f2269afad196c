// Softmax cross-entropy (with label smoothing) and accuracy counting on CUDA. One block per row
// for the softmax; the batch mean is summed in a fixed order and written to the device loss
// tensor, so the forward never waits for the GPU. count_correct is the one op that does.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;
using detail::kThreads;

// Row `blockIdx.x`: probs = softmax(logits) and the row's smoothed loss
//   -(1 - ls) log p[label] - (ls / C) sum_j log p[j]   (PyTorch's label_smoothing).
// A label outside [0, C) gives a NaN loss (the GPU cannot throw); nothing is read out of range.
__global__ void softmax_xent_kernel(float* probs, float* row_loss, const float* logits, const int64_t* labels,
                                    int64_t C, float smoothing) {
  __shared__ float shared[33];
  int64_t row = blockIdx.x;
  const float* x = logits + row * C;
  float* p = probs + row * C;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) m = x[j] > m ? x[j] : m;
  m = detail::block_max(m, shared, -INFINITY);
  float sum_exp = 0.f, sum_shifted = 0.f;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
    float e = expf(x[j] - m);
    p[j] = e;
    sum_exp += e;
    sum_shifted += x[j] - m;
  }
  sum_exp = detail::block_sum(sum_exp, shared);
  sum_shifted = detail::block_sum(sum_shifted, shared);
  float inv = 1.f / sum_exp;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) p[j] *= inv;
  if (threadIdx.x == 0) {
    int64_t label = labels[row];
    float log_sum = logf(sum_exp);
    float loss = NAN;
    if (label >= 0 && label < C) {
      float logp_label = x[label] - m - log_sum;
      float sum_logp = sum_shifted - static_cast<float>(C) * log_sum;
      loss = -(1.f - smoothing) * logp_label - smoothing / static_cast<float>(C) * sum_logp;
    }
    row_loss[row] = loss;
  }
}

// loss[0] = mean of the row losses, summed in double in a fixed order (one block).
__global__ void mean_kernel(float* loss, const float* row_loss, int64_t rows) {
  __shared__ double shared[33];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) s += row_loss[i];
  s = detail::block_sum(s, shared);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(s / static_cast<double>(rows));
}

// dlogits += (scale / N) (probs - (1 - ls) onehot(label) - ls / C).
__global__ void xent_backward_kernel(float* dlogits, const float* probs, const int64_t* labels, int64_t rows,
                                     int64_t C, float smoothing, float factor) {
  float uniform = smoothing / static_cast<float>(C);
  DPX_CUDA_LOOP(i, rows * C) {
    int64_t row = i / C, j = i % C;
    float target = uniform + (labels[row] == j ? 1.f - smoothing : 0.f);
    dlogits[i] += factor * (probs[i] - target);
  }
}

// One warp per row: the row's arg-max (first maximum wins) compared with its label.
__global__ void count_correct_kernel(unsigned long long* count, const float* logits, const int64_t* labels,
                                     int64_t rows, int64_t C) {
  int lane = threadIdx.x & 31;
  int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  // The row is the same for all lanes of a warp, so the shuffles below see full warps.
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
    const float* x = logits + row * C;
    float best = -INFINITY;
    int64_t best_at = C;  // C: "none yet", loses every comparison
    for (int64_t j = lane; j < C; j += 32)
      if (best_at == C || x[j] > best) {
        best = x[j];
        best_at = j;
      }
    for (int offset = 16; offset > 0; offset >>= 1) {
      float other = __shfl_down_sync(0xffffffffu, best, offset);
      long long other_at = __shfl_down_sync(0xffffffffu, static_cast<long long>(best_at), offset);
      if (other_at < C && (best_at == C || other > best || (other == best && other_at < best_at))) {
        best = other;
        best_at = other_at;
      }
    }
    if (lane == 0 && best_at == labels[row]) atomicAdd(count, 1ull);
  }
}


}  // namespace

void cross_entropy_forward(Context& ctx, Tensor& loss, Tensor& probs, const Tensor& logits, const Tensor& labels,
                           float label_smoothing) {
  CudaState& st = state_of(ctx);
  const char* op = "cross_entropy_forward";
  int64_t rows = logits.size(0), C = logits.size(1);
  float* ploss = f32(loss, op, "loss");
  detail::Scratch row_loss(st, sizeof(float) * rows);
  // Labels are not checked against [0, C) here: that would need the labels on the host (a
  // wait). A bad label makes the loss NaN instead (the CPU op throws).
  softmax_xent_kernel<<<static_cast<unsigned>(rows), kThreads, 0, st.stream>>>(
      f32(probs, op, "probs"), row_loss.as<float>(), f32(logits, op, "logits"),
      static_cast<const int64_t*>(labels.raw()), C, label_smoothing);
  check_launch();
  mean_kernel<<<1, 1024, 0, st.stream>>>(ploss, row_loss.as<float>(), rows);
  check_launch();
}

void cross_entropy_backward(Context& ctx, Tensor& dlogits, const Tensor& probs, const Tensor& labels,
                            float label_smoothing, float scale) {
  CudaState& st = state_of(ctx);
  const char* op = "cross_entropy_backward";
  int64_t rows = probs.size(0), C = probs.size(1);
  if (rows == 0 || C == 0) return;
  xent_backward_kernel<<<detail::grid_for(rows * C), kThreads, 0, st.stream>>>(
      f32(dlogits, op, "dlogits"), f32(probs, op, "probs"), static_cast<const int64_t*>(labels.raw()), rows, C,
      label_smoothing, scale / static_cast<float>(rows));
  check_launch();
}

// The count must reach the host, so this op waits for the stream: call it once per evaluation
// batch (or less), not inside the timed training step.
int64_t count_correct(Context& ctx, const Tensor& logits, const Tensor& labels) {
  CudaState& st = state_of(ctx);
  const char* op = "count_correct";
  int64_t rows = logits.size(0), C = logits.size(1);
  if (rows == 0 || C == 0) return 0;
  detail::Scratch count(st, sizeof(unsigned long long));
  DPX_CUDA_CHECK(cudaMemsetAsync(count.as<void>(), 0, sizeof(unsigned long long), st.stream));
  int64_t threads = rows * 32;
  count_correct_kernel<<<detail::grid_for(threads), kThreads, 0, st.stream>>>(
      count.as<unsigned long long>(), f32(logits, op, "logits"), static_cast<const int64_t*>(labels.raw()), rows, C);
  check_launch();
  DPX_CUDA_CHECK(cudaMemcpyAsync(st.host_result, count.as<void>(), sizeof(int64_t), cudaMemcpyDeviceToHost, st.stream));
  DPX_CUDA_CHECK(cudaStreamSynchronize(st.stream));
  return *st.host_result;
}

}  // namespace dpx::cuda
