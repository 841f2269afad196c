// Reference layout copies and their backward: permute (torch.permute made contiguous), roll
// over H and W of (A, H, W, B) maps, zero padding at the bottom and right of such maps, and
// Swin's window partition and merge.
#include <vector>

#include "kernels/ref/ref_ops.hpp"

namespace dpx::ref {

namespace {

// The flat index in `in` of out's element i, where out = in.permute(perm): out's coordinate
// k is in's coordinate perm[k].
int64_t permuted_index(const Shape& in, const std::vector<int>& perm, int64_t i) {
  const int dims = static_cast<int>(in.size());
  std::vector<int64_t> in_coord(in.size());
  for (int k = dims - 1; k >= 0; --k) {
    const int64_t out_size = in[perm[k]];  // out's dimension k
    in_coord[perm[k]] = i % out_size;
    i /= out_size;
  }
  int64_t index = 0;
  for (int d = 0; d < dims; ++d) index = index * in[d] + in_coord[d];
  return index;
}

// n mod m in [0, m) for any sign of n.
int64_t wrap(int64_t n, int64_t m) { return ((n % m) + m) % m; }

}  // namespace

void permute(Context&, Tensor& out, const Tensor& in, const std::vector<int>& perm) {
  float* o = out.data<float>();
  const float* x = in.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = x[permuted_index(in.shape(), perm, i)];
}

// Each element goes back where it came from: din[index in in of i] += dout[i] (or =).
void permute_backward(Context&, Tensor& din, const Tensor& dout, const std::vector<int>& perm, DxMode dx_mode) {
  float* g = din.data<float>();
  const float* d = dout.data<float>();
  for (int64_t i = 0; i < dout.numel(); ++i) {
    float& slot = g[permuted_index(din.shape(), perm, i)];
    slot = dx_mode == DxMode::overwrite ? d[i] : slot + d[i];
  }
}

// out[a][h][w][b] = in[a][(h - shift_h) mod H][(w - shift_w) mod W][b]
void roll(Context&, Tensor& out, const Tensor& in, int64_t shift_h, int64_t shift_w) {
  const int64_t A = in.size(0), H = in.size(1), W = in.size(2), B = in.size(3);
  const float* x = in.data<float>();
  float* o = out.data<float>();
  for (int64_t a = 0; a < A; ++a)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t b = 0; b < B; ++b) {
          const int64_t from_h = wrap(h - shift_h, H), from_w = wrap(w - shift_w, W);
          o[((a * H + h) * W + w) * B + b] = x[((a * H + from_h) * W + from_w) * B + b];
        }
}

// din[a][h][w][b] += dout[a][(h + shift_h) mod H][(w + shift_w) mod W][b]: rolled back.
void roll_backward(Context&, Tensor& din, const Tensor& dout, int64_t shift_h, int64_t shift_w) {
  const int64_t A = dout.size(0), H = dout.size(1), W = dout.size(2), B = dout.size(3);
  const float* d = dout.data<float>();
  float* g = din.data<float>();
  for (int64_t a = 0; a < A; ++a)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t b = 0; b < B; ++b) {
          const int64_t to_h = wrap(h + shift_h, H), to_w = wrap(w + shift_w, W);
          g[((a * H + h) * W + w) * B + b] += d[((a * H + to_h) * W + to_w) * B + b];
        }
}

// out (A, H2, W2, B) = in (A, H, W, B) where h < H and w < W, zero elsewhere.
void pad_hw(Context&, Tensor& out, const Tensor& in) {
  const int64_t A = in.size(0), H = in.size(1), W = in.size(2), B = in.size(3);
  const int64_t H2 = out.size(1), W2 = out.size(2);
  const float* x = in.data<float>();
  float* o = out.data<float>();
  for (int64_t a = 0; a < A; ++a)
    for (int64_t h = 0; h < H2; ++h)
      for (int64_t w = 0; w < W2; ++w)
        for (int64_t b = 0; b < B; ++b)
          o[((a * H2 + h) * W2 + w) * B + b] = h < H && w < W ? x[((a * H + h) * W + w) * B + b] : 0.f;
}

// din (A, H, W, B) += dout (A, H2, W2, B) cropped to its first H rows and W columns.
void pad_hw_backward(Context&, Tensor& din, const Tensor& dout) {
  const int64_t A = din.size(0), H = din.size(1), W = din.size(2), B = din.size(3);
  const int64_t H2 = dout.size(1), W2 = dout.size(2);
  const float* d = dout.data<float>();
  float* g = din.data<float>();
  for (int64_t a = 0; a < A; ++a)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t b = 0; b < B; ++b) g[((a * H + h) * W + w) * B + b] += d[((a * H2 + h) * W2 + w) * B + b];
}

// windows[b][i][j][u][v][c] = x[b][hp][wp][c] with hp = (i wh + u + shift_h) mod (nH wh) (the
// roll by -shift_h), and zero where hp >= H (the padding); likewise along W.
void window_partition(Context&, Tensor& windows, const Tensor& x, int64_t shift_h, int64_t shift_w) {
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const int64_t nH = windows.size(1), nW = windows.size(2), wh = windows.size(3), ww = windows.size(4);
  const float* in = x.data<float>();
  float* out = windows.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < nH; ++i)
      for (int64_t j = 0; j < nW; ++j)
        for (int64_t u = 0; u < wh; ++u)
          for (int64_t v = 0; v < ww; ++v)
            for (int64_t c = 0; c < C; ++c) {
              const int64_t hp = wrap(i * wh + u + shift_h, nH * wh), wp = wrap(j * ww + v + shift_w, nW * ww);
              *out++ = hp < H && wp < W ? in[((b * H + hp) * W + wp) * C + c] : 0.f;
            }
}

// y[b][h][w][c] = windows at the rolled position (h - shift_h) mod (nH wh), (w - shift_w) mod (nW ww).
void window_merge(Context&, Tensor& y, const Tensor& windows, int64_t shift_h, int64_t shift_w, DxMode mode) {
  const int64_t B = y.size(0), H = y.size(1), W = y.size(2), C = y.size(3);
  const int64_t nH = windows.size(1), nW = windows.size(2), wh = windows.size(3), ww = windows.size(4);
  const float* in = windows.data<float>();
  float* out = y.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t hr = wrap(h - shift_h, nH * wh), wr = wrap(w - shift_w, nW * ww);
          const float v = in[((((b * nH + hr / wh) * nW + wr / ww) * wh + hr % wh) * ww + wr % ww) * C + c];
          float& slot = out[((b * H + h) * W + w) * C + c];
          slot = mode == DxMode::overwrite ? v : slot + v;
        }
}

}  // namespace dpx::ref
