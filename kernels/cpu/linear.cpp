// CPU matrix products: the tiled GEMM every CPU kernel shares, linear forward/backward, and
// batched matmul. Each tile is one single-threaded product — oneDNN's sgemm where dpx is built
// with oneDNN (1.4-1.7x Eigen's speed on this machine's AVX-512: benchmarks/RESULTS.md), Eigen's
// otherwise (EIGEN_DONT_PARALLELIZE); OpenMP shares the tiles, whose bounds depend only on the
// shape, so results never depend on threads.
// GCC 12 flags the self-initialised `__Y` of _mm512_undefined_ps, inlined from Eigen's AVX-512
// GEMM kernel, as maybe-uninitialised: a known false positive that would bury real warnings.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

#ifdef DPX_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace dpx::cpu {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using MutMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

// Tiles of C: at most 256 x 512 (Eigen blocks for the caches inside a tile; on 256..1024
// squares this ran within a few percent of one untiled product), halved down to 64 x 64 until
// there are kMinTiles of them, so that mid-sized products still split over a few threads.
// The tiling depends on M, N and K only; each tile is one single-threaded Eigen product.
constexpr int64_t kMaxTileRows = 256, kMaxTileCols = 512, kMinTileSide = 64, kMinTiles = 4;
// Products below this many multiply-adds stay one tile (one Eigen call, no parallel region).
constexpr int64_t kMinTiledMacs = int64_t{1} << 21;

struct Tiling {
  int64_t rows, cols, tiles_m, tiles_n;
  int64_t count() const { return tiles_m * tiles_n; }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Tiling tiling_for(int64_t M, int64_t N, int64_t K) {
  Tiling t{M, N, 1, 1};
  if (M * N * std::max<int64_t>(K, 1) >= kMinTiledMacs) {
    t.rows = std::min(M, kMaxTileRows);
    t.cols = std::min(N, kMaxTileCols);
    auto halve = [](int64_t v) { return std::max(kMinTileSide, ceil_div(v, 32) * 16); };
    while (ceil_div(M, t.rows) * ceil_div(N, t.cols) < kMinTiles) {
      if (t.cols >= t.rows && t.cols > kMinTileSide)
        t.cols = halve(t.cols);
      else if (t.rows > kMinTileSide)
        t.rows = halve(t.rows);
      else
        break;
    }
  }
  t.tiles_m = t.rows > 0 ? ceil_div(M, t.rows) : 0;
  t.tiles_n = t.cols > 0 ? ceil_div(N, t.cols) : 0;
  return t;
}

// Tile `tile` of C (rows [i0, i0 + mi), columns [j0, j0 + nj)): one gemm_one call.
void gemm_tiled(const Tiling& t, int64_t tile, int64_t M, int64_t N, int64_t K, const float* A,
                bool trans_a, const float* B, bool trans_b, float* C, float alpha, float beta) {
  const int64_t i0 = (tile / t.tiles_n) * t.rows, j0 = (tile % t.tiles_n) * t.cols;
  const int64_t mi = std::min(t.rows, M - i0), nj = std::min(t.cols, N - j0);
  const float* a = trans_a ? A + i0 : A + i0 * K;
  const float* b = trans_b ? B + j0 * K : B + j0;
  detail::gemm_one(trans_a, trans_b, mi, nj, K, alpha, a, trans_a ? M : K, b, trans_b ? K : N, beta,
                   C + i0 * N + j0, N);
}

}  // namespace

namespace detail {

void gemm_one(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
              int64_t ldc) {
  if (M <= 0 || N <= 0) return;
#ifdef DPX_WITH_ONEDNN
  if (K > 0) {
    // Row-major sgemm on this thread alone (oneDNN's OpenMP build would otherwise take
    // omp_get_max_threads() threads outside a parallel region).
    const OmpThreads one(1);
    if (dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
                   ldc) == dnnl_success)
      return;
    // (oneDNN refuses only bad arguments, which the op checks exclude; Eigen below if it does.)
  }
#endif
  MutMap c(C, M, N, Eigen::OuterStride<>(ldc));
  auto run = [&](const auto& a, const auto& b) {
    if (beta == 0.f) {
      if (alpha == 1.f)
        c.noalias() = a * b;
      else
        c.noalias() = (alpha * a) * b;
    } else {
      if (beta != 1.f) c *= beta;
      if (alpha == 1.f)
        c.noalias() += a * b;
      else
        c.noalias() += (alpha * a) * b;
    }
  };
  // op(A) is (M, K): stored rows (M, K), or stored columns when A is (K, M); likewise op(B).
  ConstMap a_rows(A, M, K, Eigen::OuterStride<>(std::max<int64_t>(lda, 1)));
  ConstMap a_cols(A, K, M, Eigen::OuterStride<>(std::max<int64_t>(lda, 1)));
  ConstMap b_rows(B, K, N, Eigen::OuterStride<>(std::max<int64_t>(ldb, 1)));
  ConstMap b_cols(B, N, K, Eigen::OuterStride<>(std::max<int64_t>(ldb, 1)));
  if (!trans_a && !trans_b)
    run(a_rows, b_rows);
  else if (!trans_a && trans_b)
    run(a_rows, b_cols.transpose());
  else if (trans_a && !trans_b)
    run(a_cols.transpose(), b_rows);
  else
    run(a_cols.transpose(), b_cols.transpose());
}

void gemm(int threads, int64_t M, int64_t N, int64_t K, const float* A, bool trans_a,
          const float* B, bool trans_b, float* C, float alpha, float beta) {
  if (M <= 0 || N <= 0) return;
  Tiling t = tiling_for(M, N, K);
  int nt = t.count() > 1 ? threads : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
  for (int64_t tile = 0; tile < t.count(); ++tile)
    gemm_tiled(t, tile, M, N, K, A, trans_a, B, trans_b, C, alpha, beta);
}

}  // namespace detail

using namespace detail;

void linear_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b) {
  const int64_t N = x.size(0), in = x.size(1), out = w.size(0);
  float* yp = y.data<float>();
  if (b && b->defined()) {
    const float* bp = b->data<float>();
    int nt = threads_for(ctx, N * out);
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t n = 0; n < N; ++n) std::copy(bp, bp + out, yp + n * out);
    gemm(ctx.threads, N, out, in, x.data<float>(), false, w.data<float>(), true, yp, 1.f, 1.f);
  } else {
    gemm(ctx.threads, N, out, in, x.data<float>(), false, w.data<float>(), true, yp, 1.f, 0.f);
  }
}

void linear_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                     const Tensor& x, const Tensor& w, DxMode dx_mode) {
  const int64_t N = x.size(0), in = x.size(1), out = w.size(0);
  const float* dyp = dy.data<float>();
  if (dx) {
    // dx (N, in) (+)= dy (N, out) w (out, in): beta 0 reads nothing of dx
    gemm(ctx.threads, N, in, out, dyp, false, w.data<float>(), false, dx->data<float>(), 1.f,
         dx_mode == DxMode::overwrite ? 0.f : 1.f);
  }
  if (dw) {
    // dw (out, in) += dy^T (out, N) x (N, in)
    gemm(ctx.threads, out, in, N, dyp, true, x.data<float>(), false, dw->data<float>(), 1.f, 1.f);
  }
  if (db) {
    float* dbp = db->data<float>();
    // Column sums in a fixed row order, in double; blocks of columns keep rows contiguous.
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (out + kBlock - 1) / kBlock;
    int nt = threads_for(ctx, N * out);
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t j0 = blk * kBlock, j1 = std::min(out, j0 + kBlock);
      double acc[kBlock] = {};
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += dyp[n * out + j];
      for (int64_t j = j0; j < j1; ++j) dbp[j] += static_cast<float>(acc[j - j0]);
    }
  }
}

void matmul(Context& ctx, Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
            float alpha, float beta) {
  int64_t batch = 1;
  for (int i = 0; i < a.dim() - 2; ++i) batch *= a.size(i);
  const int64_t M = trans_a ? a.size(-1) : a.size(-2), K = trans_a ? a.size(-2) : a.size(-1);
  const int64_t N = trans_b ? b.size(-2) : b.size(-1);
  if (M == 0 || N == 0 || batch == 0) return;
  const float *ap = a.data<float>(), *bp = b.data<float>();
  float* cp = c.data<float>();
  Tiling t = tiling_for(M, N, K);
  const int64_t units = batch * t.count();
  int nt = units > 1 && batch * M * N * std::max<int64_t>(K, 1) >= kMinTiledMacs ? ctx.threads : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t i = u / t.count();
    gemm_tiled(t, u % t.count(), M, N, K, ap + i * M * K, trans_a, bp + i * K * N, trans_b,
               cp + i * M * N, alpha, beta);
  }
}

}  // namespace dpx::cpu
