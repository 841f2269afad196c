// Matrix products on CUDA through cuBLAS (fp32 compute; TF32 only with ctx.allow_tf32; bf16/fp16
// operands with fp32 accumulation under ctx.compute, --precision).
// cuBLAS is column-major: a row-major (r, c) matrix is its column-major transpose, so every
// product C = A B is issued as C^T = B^T A^T with the operands swapped.
#include <algorithm>
#include <climits>
#include <optional>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;

// db (cols) += column sums of dy (rows, cols). A 32 x 8 block owns 32 columns; its 8 row lanes
// sum strided rows and are then added in a fixed order, so the result is reproducible.
// The bias gradient, db[col] += sum over rows of dy[row, col], in two passes with a fixed order
// of additions (the same bits for any launch): blocks of 32 columns x 8 row lanes each sum a chunk
// of kSumRowsPerChunk rows into partial[chunk, col]; then one thread per column adds the chunks in
// order. One pass with a block per 32 columns (as before) left Swin's first stage, 200,704 rows
// and 96 columns, to 3 blocks: its Linear backward took 46 ms a step against cuBLAS's 27 ms in
// PyTorch (H100, 2026-11-26).
constexpr int64_t kSumRowsPerChunk = 512;

__global__ void column_partial_sum_kernel(float* partial, const float* dy, int64_t rows, int64_t cols) {
  __shared__ float part[8][33];
  const int64_t col = blockIdx.x * 32 + threadIdx.x;
  const int64_t chunk = blockIdx.y, first = chunk * kSumRowsPerChunk;
  const int64_t last = min(rows, first + kSumRowsPerChunk);
  float s = 0.f;
  if (col < cols)
    for (int64_t r = first + threadIdx.y; r < last; r += 8) s += dy[r * cols + col];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.f;
    for (int k = 0; k < 8; ++k) total += part[k][threadIdx.x];
    partial[chunk * cols + col] = total;
  }
}

__global__ void column_chunks_sum_kernel(float* db, const float* partial, int64_t chunks, int64_t cols) {
  DPX_CUDA_LOOP(col, cols) {
    float total = 0.f;
    for (int64_t c = 0; c < chunks; ++c) total += partial[c * cols + col];
    db[col] += total;
  }
}

__global__ void scale_kernel(float* c, float beta, int64_t n) {
  DPX_CUDA_LOOP(i, n) c[i] *= beta;
}

int as_int(int64_t v, const char* op, const char* what) {
  DPX_CHECK(v >= 0 && v <= INT_MAX, op, ": ", what, " = ", v, " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

cublasComputeType_t compute_type(const Context& ctx) {
  // CUBLAS_COMPUTE_32F keeps fp32 arithmetic whatever the handle's math mode says; with bf16/fp16
  // operands it runs on tensor cores and still accumulates in fp32.
  return ctx.allow_tf32 && ctx.compute == DType::f32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// Elements a column-major operand spans: `batch` matrices `stride` apart, each `cols` columns of
// `rows` values `ld` apart.
int64_t extent(int rows, int cols, int ld, int64_t stride, int batch) {
  return (batch - 1) * stride + static_cast<int64_t>(ld) * (cols - 1) + rows;
}

// Column-major C (m, n) = alpha op(A) op(B) + beta C, `batch` times with the given strides. With
// ctx.compute bf16 or fp16 (--precision), A and B are rounded to it first and cuBLAS multiplies
// them on tensor cores, accumulating in fp32 into the fp32 C (cublasGemmEx's mixed-precision case).
void gemm(const Context& ctx, CudaState& st, cublasOperation_t op_a, cublasOperation_t op_b, int m,
          int n, int k, float alpha, const float* a, int lda, int64_t stride_a, const float* b, int ldb,
          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {
    // An empty sum leaves C = beta C; done here rather than relying on cuBLAS accepting k = 0.
    // C is contiguous (stride_c = m n, or a single matrix), and beta = 0 must not read C.
    int64_t total = static_cast<int64_t>(m) * n * batch;
    if (beta == 0.f) {
      DPX_CUDA_CHECK(cudaMemsetAsync(c, 0, total * sizeof(float), st.stream));
    } else if (beta != 1.f) {
      scale_kernel<<<detail::grid_for(total), detail::kThreads, 0, st.stream>>>(c, beta, total);
      check_launch();
    }
    return;
  }
  const void* pa = a;
  const void* pb = b;
  cudaDataType_t type = CUDA_R_32F;
  std::optional<detail::HalfCopy> ha, hb;
  if (ctx.compute != DType::f32) {
    const bool ta = op_a != CUBLAS_OP_N, tb = op_b != CUBLAS_OP_N;
    ha.emplace(st, a, extent(ta ? k : m, ta ? m : k, lda, stride_a, batch), ctx.compute);
    hb.emplace(st, b, extent(tb ? n : k, tb ? k : n, ldb, stride_b, batch), ctx.compute);
    pa = ha->get();
    pb = hb->get();
    type = ctx.compute == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  }
  st.set_cublas_tf32(ctx.allow_tf32 && ctx.compute == DType::f32);
  if (batch == 1) {
    DPX_CUBLAS_CHECK(cublasGemmEx(st.cublas, op_a, op_b, m, n, k, &alpha, pa, type, lda, pb, type, ldb, &beta, c,
                                  CUDA_R_32F, ldc, compute_type(ctx), CUBLAS_GEMM_DEFAULT));
  } else {
    DPX_CUBLAS_CHECK(cublasGemmStridedBatchedEx(st.cublas, op_a, op_b, m, n, k, &alpha, pa, type, lda, stride_a, pb,
                                                type, ldb, stride_b, &beta, c, CUDA_R_32F, ldc, stride_c, batch,
                                                compute_type(ctx), CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace

void linear_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b) {
  CudaState& st = state_of(ctx);
  const char* op = "linear_forward";
  int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  float* py = f32(y, op, "y");
  if (rows == 0 || out == 0) return;
  // y^T (out, N) = W (out, in) x^T (in, N): W is stored as column-major (in, out), hence op T.
  // Every product here is asked for with beta 0, as PyTorch asks for it (addmm's bias in cuBLASLt's
  // epilogue, mm with beta 0), the bias then added by a pass over the rows: the same bytes as the
  // bias broadcast first and a GEMM adding into it with beta 1, which is how this ran on the H200
  // (2026-11-28), where Swin's Linear layers reached 59 TFLOP/s forward against addmm's 302 at
  // TF32, and their backward (the weight gradient added into with beta 1) half of PyTorch's, while
  // the attention's batched products, with beta 0, matched PyTorch's. Beta is the likely
  // difference (kernels/cuda/conv2d.cu found the same in cuDNN's filter gradient); not yet run.
  gemm(ctx, st, CUBLAS_OP_T, CUBLAS_OP_N, as_int(out, op, "out"), as_int(rows, op, "N"),
       as_int(in, op, "in"), 1.f, f32(w, op, "w"), as_int(in, op, "in"), 0, f32(x, op, "x"),
       as_int(in, op, "in"), 0, 0.f, py, as_int(out, op, "out"), 0, 1);
  if (b) {
    // y += b down the rows: about 8 rows a thread, not a thread per element with a 64-bit i % cols
    // (Swin's Linear layers: 19 M floats).
    detail::broadcast_rows_kernel<true><<<detail::row_tile_grid(rows, out, 8), detail::kRowTile, 0, st.stream>>>(
        py, f32(*b, op, "b"), rows, out);
    check_launch();
  }
}

void linear_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                     const Tensor& x, const Tensor& w, DxMode dx_mode) {
  CudaState& st = state_of(ctx);
  const char* op = "linear_backward";
  int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  int irows = as_int(rows, op, "N"), iin = as_int(in, op, "in"), iout = as_int(out, op, "out");
  const float* pdy = f32(dy, op, "dy");
  // Both products with beta 0 (linear_forward says why): into dx itself when it is written over,
  // else into a new tensor then added (12 bytes a value), as the weight gradient always is (12 bytes
  // a weight). fl(old + product) either way: the same bits as beta 1 from the same kernel.
  const auto added = [&](Tensor& into, auto product) {
    Tensor fresh = Tensor::empty(into.shape(), DType::f32, into.device());
    product(f32(fresh, op, "a gradient"));
    cuda::axpy(ctx, into, 1.f, fresh);
  };
  if (dx) {
    // dx^T (in, N) (+)= W^T (in, out) dy^T (out, N): with beta 0 cuBLAS reads nothing of dx.
    const auto product = [&](float* c) {
      gemm(ctx, st, CUBLAS_OP_N, CUBLAS_OP_N, iin, irows, iout, 1.f, f32(w, op, "w"), iin, 0, pdy, iout, 0, 0.f, c,
           iin, 0, 1);
    };
    if (dx_mode == DxMode::overwrite)
      product(f32(*dx, op, "dx"));
    else
      added(*dx, product);
  }
  if (dw) {
    // dw^T (in, out) += x^T (in, N) dy (N, out).
    added(*dw, [&](float* c) {
      gemm(ctx, st, CUBLAS_OP_N, CUBLAS_OP_T, iin, iout, irows, 1.f, f32(x, op, "x"), iin, 0, pdy, iout, 0, 0.f, c,
           iin, 0, 1);
    });
  }
  if (db && out > 0) {
    const int64_t chunks = std::max<int64_t>(1, (rows + kSumRowsPerChunk - 1) / kSumRowsPerChunk);
    DPX_CHECK(chunks <= 65535, op, ": ", rows, " rows exceed the bias gradient's grid (", 65535 * kSumRowsPerChunk,
              ")");
    const detail::Scratch partial(st, static_cast<size_t>(chunks * out) * sizeof(float));
    const dim3 block(32, 8), grid(static_cast<unsigned>((out + 31) / 32), static_cast<unsigned>(chunks));
    column_partial_sum_kernel<<<grid, block, 0, st.stream>>>(partial.as<float>(), pdy, rows, out);
    check_launch();
    column_chunks_sum_kernel<<<detail::grid_for(out), detail::kThreads, 0, st.stream>>>(f32(*db, op, "db"),
                                                                                      partial.as<float>(), chunks, out);
    check_launch();
  }
}

void matmul(Context& ctx, Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
            float alpha, float beta) {
  CudaState& st = state_of(ctx);
  const char* op = "matmul";
  int nd = a.dim();
  int64_t batch = 1;
  for (int d = 0; d < nd - 2; ++d) {
    batch *= a.size(d);
  }
  int64_t m = trans_a ? a.size(-1) : a.size(-2), k = trans_a ? a.size(-2) : a.size(-1);
  int64_t kb = trans_b ? b.size(-1) : b.size(-2), n = trans_b ? b.size(-2) : b.size(-1);
  // Row-major C = op(A) op(B) is column-major C^T (n, m) = op(B)^T op(A)^T: B comes first. A
  // row-major stored (r, c) matrix read column-major is (c, r) with leading dimension c.
  int im = as_int(m, op, "M"), in = as_int(n, op, "N"), ik = as_int(k, op, "K");
  int ldb = as_int(b.size(-1), op, "b's last dimension"), lda = as_int(a.size(-1), op, "a's last dimension");
  gemm(ctx, st, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, in, im, ik,
       alpha, f32(b, op, "b"), ldb, k * n, f32(a, op, "a"), lda, m * k, beta, f32(c, op, "c"), in,
       m * n, as_int(batch, op, "batch"));
}

}  // namespace dpx::cuda
