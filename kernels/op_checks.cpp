// The shape, dtype and parameter checks of every op (kernels/op_checks.hpp): one function per
// row of kernels/ops.def, in the order of that list, each throwing dpx::Error that names the
// op, the argument and what was expected.
#include "kernels/op_checks.hpp"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/capture.hpp"
#include "core/error.hpp"
#include "kernels/layout_plan.hpp"

namespace dpx::ops::check {

namespace {

void require_defined(const char* op, const char* name, const Tensor& t) {
  if (!t.defined()) fail(op, ": ", name, " is an undefined tensor; allocate it before the call");
}

void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  require_defined(op, name, t);
  if (t.dtype() != dtype)
    fail(op, ": ", name, " ", shape_str(t.shape()), " must be ", dtype_name(dtype), ", got ",
         dtype_name(t.dtype()));
}

void require_f32(const char* op, const char* name, const Tensor& t) {
  require_dtype(op, name, t, DType::f32);
}

// A tensor of `dtype` holding exactly `numel` elements, whatever its shape (a scalar on the
// device: a counter, a value read there).
void require_elements(const char* op, const char* name, const Tensor& t, DType dtype, int64_t numel) {
  require_dtype(op, name, t, dtype);
  if (t.numel() != numel)
    fail(op, ": ", name, " ", shape_str(t.shape()), " must hold exactly ",
         numel == 1 ? std::string("one element") : detail::concat(numel, " elements"));
}

void require_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  require_defined(op, name, t);
  if (t.shape() != shape)
    fail(op, ": ", name, " has shape ", shape_str(t.shape()), ", expected ", shape_str(shape));
}

// f32 and exactly `shape`.
void require_f32_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  require_f32(op, name, t);
  require_shape(op, name, t, shape);
}

void require_dim(const char* op, const char* name, const Tensor& t, int dim) {
  require_defined(op, name, t);
  if (t.dim() != dim)
    fail(op, ": ", name, " must have ", dim, " dimensions, got shape ", shape_str(t.shape()));
}

void require_same_numel(const char* op, const char* a_name, const Tensor& a, const char* b_name,
                        const Tensor& b) {
  if (a.numel() != b.numel())
    fail(op, ": ", a_name, " ", shape_str(a.shape()), " and ", b_name, " ", shape_str(b.shape()),
         " must have the same number of elements");
}

// Both f32 with as many elements: the elementwise ops' rule.
void require_f32_pair(const char* op, const char* a_name, const Tensor& a, const char* b_name,
                      const Tensor& b) {
  require_f32(op, a_name, a);
  require_f32(op, b_name, b);
  require_same_numel(op, a_name, a, b_name, b);
}

// dx, dy and the saved input or output of a unary op's backward: f32, as many elements.
void require_unary_backward(const char* op, const Tensor& dx, const Tensor& dy,
                            const char* saved_name, const Tensor& saved) {
  require_f32_pair(op, "dx", dx, "dy", dy);
  require_f32_pair(op, "dy", dy, saved_name, saved);
}

// A map a convolution, a batch norm or a ReLU hands the next layer (ops.def, "half-precision
// maps"): f32, or ctx.compute where that is bf16 or fp16 (--precision).
void require_map_dtype(const char* op, const char* name, const Tensor& t, const Context& ctx) {
  require_defined(op, name, t);
  if (t.dtype() == DType::f32 || (ctx.compute != DType::f32 && t.dtype() == ctx.compute)) return;
  fail(op, ": ", name, " ", shape_str(t.shape()), " must be f32",
       ctx.compute != DType::f32 ? detail::concat(" or ", dtype_name(ctx.compute), " (the compute's precision)")
                                 : std::string(" (half-precision maps need --precision bf16 or fp16)"),
       ", got ", dtype_name(t.dtype()));
}

// ---- convolution and pooling windows ------------------------------------------------------
// The output (N, C_out, OH, OW) of a convolution of x by w, after checking that they fit, in
// p.format's layout.
Shape conv_output(const char* op, const Tensor& x, const Tensor& w, const Conv2dParams& p, const Context& ctx) {
  require_map_dtype(op, "x", x, ctx);
  require_f32(op, "w", w);
  require_dim(op, "x", x, 4);
  require_dim(op, "w", w, 4);
  if (p.groups < 1 || p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 ||
      p.pad_h < 0 || p.pad_w < 0)
    fail(op, ": groups ", p.groups, ", stride (", p.stride_h, ", ", p.stride_w, "), dilation (",
         p.dilation_h, ", ", p.dilation_w, ") must be positive and padding (", p.pad_h, ", ",
         p.pad_w, ") not negative");
  const ImageDims d = image_dims(x.shape(), p.format);
  const int64_t C = d.c, K = w.size(0), G = p.groups;
  if (C % G != 0 || K % G != 0 || w.size(1) * G != C)
    fail(op, ": x ", shape_str(x.shape()), " (", format_name(p.format), ") and w ", shape_str(w.shape()),
         " do not fit ", G, " groups: need C_in and C_out divisible by groups and w (C_out, C_in / groups, kH, kW)");
  const int64_t kh = w.size(2), kw = w.size(3);
  const int64_t OH = conv_out_size(d.h, static_cast<int>(kh), p.stride_h, p.pad_h, p.dilation_h);
  const int64_t OW = conv_out_size(d.w, static_cast<int>(kw), p.stride_w, p.pad_w, p.dilation_w);
  if (OH <= 0 || OW <= 0)
    fail(op, ": kernel ", kh, "x", kw, " (dilation ", p.dilation_h, "x", p.dilation_w,
         ") does not fit input ", shape_str(x.shape()), " padded by (", p.pad_h, ", ", p.pad_w, ")");
  return image_shape({d.n, K, OH, OW}, p.format);
}

// The output (N, C, OH, OW) of pooling x, after checking the window against PyTorch's rules, in
// p.format's layout. x's dtype is the caller's to check (max pooling takes half-precision maps).
Shape pool_output(const char* op, const Tensor& x, const Pool2dParams& p) {
  require_dim(op, "x", x, 4);
  if (p.kernel_h < 1 || p.kernel_w < 1 || p.stride_h < 1 || p.stride_w < 1 || p.pad_h < 0 ||
      p.pad_w < 0)
    fail(op, ": kernel (", p.kernel_h, ", ", p.kernel_w, ") and stride (", p.stride_h, ", ",
         p.stride_w, ") must be positive and padding (", p.pad_h, ", ", p.pad_w, ") not negative");
  if (2 * p.pad_h > p.kernel_h || 2 * p.pad_w > p.kernel_w)
    fail(op, ": padding (", p.pad_h, ", ", p.pad_w, ") must be at most half the kernel (",
         p.kernel_h, ", ", p.kernel_w, ")");
  const ImageDims d = image_dims(x.shape(), p.format);
  const int64_t OH = conv_out_size(d.h, p.kernel_h, p.stride_h, p.pad_h, 1, p.ceil_mode);
  const int64_t OW = conv_out_size(d.w, p.kernel_w, p.stride_w, p.pad_w, 1, p.ceil_mode);
  if (OH <= 0 || OW <= 0)
    fail(op, ": window (", p.kernel_h, ", ", p.kernel_w, ") does not fit input ",
         shape_str(x.shape()), " padded by (", p.pad_h, ", ", p.pad_w, ")");
  return image_shape({d.n, d.c, OH, OW}, p.format);
}

// x or dx (N, C, H, W) and y or dy (N, C, OH, OW) for adaptive pooling, both in `format`.
void check_adaptive(const char* op, const char* in_name, const Tensor& in, const char* out_name,
                    const Tensor& out, MemoryFormat format) {
  require_f32(op, in_name, in);
  require_f32(op, out_name, out);
  require_dim(op, in_name, in, 4);
  require_dim(op, out_name, out, 4);
  const ImageDims i = image_dims(in.shape(), format), o = image_dims(out.shape(), format);
  if (i.n != o.n || i.c != o.c || o.h < 1 || o.w < 1)
    fail(op, ": ", in_name, " ", shape_str(in.shape()), " and ", out_name, " ",
         shape_str(out.shape()), " (", format_name(format), ") must agree on N and C and the output must not be empty");
}

// ---- normalisation ------------------------------------------------------------------------
// x (N, C, ...), f32 or in the compute's half type (require_map_dtype); returns C.
int64_t bn_channels(const char* op, const Tensor& x, const Context& ctx) {
  require_map_dtype(op, "x", x, ctx);
  if (x.dim() < 2) fail(op, ": x must be (N, C) or (N, C, ...), got shape ", shape_str(x.shape()));
  return x.size(1);
}

// y (N, C, ...) against x (N, Cx, ...): every dimension alike but C <= Cx (y's channels are x's
// first C, the batch norm ops' prefix), each f32 or in the compute's half type; returns C.
int64_t bn_prefix(const char* op, const char* y_name, const Tensor& y, const Tensor& x, const Context& ctx) {
  const int64_t Cx = bn_channels(op, x, ctx);
  require_map_dtype(op, y_name, y, ctx);
  Shape want = x.shape();
  if (y.dim() == x.dim() && y.size(1) <= Cx) want[1] = y.size(1);
  if (y.shape() != want)
    fail(op, ": ", y_name, " has shape ", shape_str(y.shape()), ", expected ", shape_str(x.shape()),
         " or the same with fewer channels (x's first ones)");
  return want[1];
}

void require_channels(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> ts,
                      int64_t C) {
  for (auto [name, t] : ts)
    if (t) require_f32_shape(op, name, *t, {C});
}

// x (..., D) with D > 0, gamma (D), mean and rstd one value per row; returns D.
int64_t ln_features(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                    const Tensor& rstd) {
  require_f32(op, "x", x);
  if (x.dim() < 1 || x.size(-1) == 0)
    fail(op, ": x ", shape_str(x.shape()), " must have a non-empty last dimension");
  const int64_t D = x.size(-1), rows = x.numel() / D;
  require_f32_shape(op, "gamma", gamma, {D});
  require_f32(op, "mean", mean);
  require_f32(op, "rstd", rstd);
  if (mean.numel() != rows || rstd.numel() != rows)
    fail(op, ": mean ", shape_str(mean.shape()), " and rstd ", shape_str(rstd.shape()), " must have ",
         rows, " elements, one per row of x ", shape_str(x.shape()));
  return D;
}

void require_last_dim(const char* op, const char* name, const Tensor& t) {
  if (t.dim() < 1 || t.size(-1) == 0)
    fail(op, ": ", name, " ", shape_str(t.shape()), " must have a non-empty last dimension");
}

// ---- broadcasting, layout -----------------------------------------------------------------
void check_broadcasts(const char* op, const char* name, const Tensor& t, const char* out_name,
                      const Shape& out) {
  require_f32(op, name, t);
  plan::check_broadcasts(op, name, t.shape(), out_name, out);
}

void check_broadcast_binary(const char* op, const Tensor& out, const Tensor& a, const Tensor& b) {
  require_f32(op, "out", out);
  check_broadcasts(op, "a", a, "out", out.shape());
  check_broadcasts(op, "b", b, "out", out.shape());
}

// A 4-dimensional f32 map (A, H, W, B) for roll and pad_hw.
void require_map(const char* op, const char* name, const Tensor& t) {
  require_f32(op, name, t);
  require_dim(op, name, t, 4);
}

// big (A, H2, W2, B) must be small (A, H, W, B) padded along dimensions 1 and 2.
void require_padded(const char* op, const char* big_name, const Tensor& big, const char* small_name,
                    const Tensor& small) {
  require_map(op, small_name, small);
  require_map(op, big_name, big);
  if (big.size(0) != small.size(0) || big.size(3) != small.size(3) || big.size(1) < small.size(1) ||
      big.size(2) < small.size(2))
    fail(op, ": ", big_name, " ", shape_str(big.shape()), " must be ", small_name, " ",
         shape_str(small.shape()), " padded along dimensions 1 and 2 only");
}

// Each part is (N, Ci, rest...) with whole's N and rest, and the Ci add up to whole's C.
void check_parts(const char* op, const char* whole_name, const Tensor& whole, const char* part_name,
                 const std::vector<const Tensor*>& parts) {
  require_f32(op, whole_name, whole);
  if (whole.dim() < 2) fail(op, ": ", whole_name, " ", shape_str(whole.shape()), " must be (N, C, ...)");
  if (parts.empty()) fail(op, ": there must be at least one ", part_name);
  int64_t channels = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = *parts[i];
    require_f32(op, part_name, t);
    bool ok = t.dim() == whole.dim() && t.size(0) == whole.size(0);
    for (int d = 2; ok && d < t.dim(); ++d) ok = t.size(d) == whole.size(d);
    if (!ok)
      fail(op, ": ", part_name, " ", i, " has shape ", shape_str(t.shape()), ", which does not fit ",
           whole_name, " ", shape_str(whole.shape()), ": all but dimension 1 must agree");
    channels += t.size(1);
  }
  if (channels != whole.size(1))
    fail(op, ": the ", part_name, "s have ", channels, " channels in all, ", whole_name, " ",
         shape_str(whole.shape()), " has ", whole.size(1));
}

// table (R, D), rows (n, D), index (n) i64. (Whether each index is in [0, R) is the data's
// business: the kernels check it.)
void check_gather(const char* op, const char* table_name, const Tensor& table, const char* rows_name,
                  const Tensor& rows, const Tensor& index) {
  require_f32(op, table_name, table);
  require_f32(op, rows_name, rows);
  require_dtype(op, "index", index, DType::i64);
  require_dim(op, table_name, table, 2);
  require_dim(op, "index", index, 1);
  require_shape(op, rows_name, rows, {index.size(0), table.size(1)});
}

// ---- loss ---------------------------------------------------------------------------------
// logits (N, C) f32 and labels (N) i64. (Whether each label is in [0, C) the kernels check.)
void check_logits_labels(const char* op, const char* logits_name, const Tensor& logits,
                         const Tensor& labels) {
  require_f32(op, logits_name, logits);
  require_dim(op, logits_name, logits, 2);
  require_dtype(op, "labels", labels, DType::i64);
  if (labels.numel() != logits.size(0))
    fail(op, ": labels ", shape_str(labels.shape()), " must hold one label per row of ",
         logits_name, " ", shape_str(logits.shape()));
}

void check_smoothing(const char* op, float eps) {
  if (!(eps >= 0.f && eps <= 1.f)) fail(op, ": label_smoothing ", eps, " must lie in [0, 1]");
}

void check_dropout_p(const char* op, float p) {
  if (!(p >= 0.f && p <= 1.f)) fail(op, ": dropout probability ", p, " must lie in [0, 1]");
}

// x (N, in), w (out, in); returns {N, in, out}.
std::array<int64_t, 3> linear_sizes(const char* op, const Tensor& x, const Tensor& w) {
  require_f32(op, "x", x);
  require_f32(op, "w", w);
  require_dim(op, "x", x, 2);
  require_dim(op, "w", w, 2);
  if (x.size(1) != w.size(1))
    fail(op, ": x ", shape_str(x.shape()), " has ", x.size(1), " features but w ",
         shape_str(w.shape()), " expects ", w.size(1));
  return {x.size(0), x.size(1), w.size(0)};
}

}  // namespace

// ==== elementwise and utility
void fill(Context&, Tensor& out, float) { require_f32("fill", "out", out); }

// A byte copy, so any dtype works as long as both sides agree (labels are i64).
void copy(Context&, Tensor& out, const Tensor& in) {
  const char* op = "copy";
  require_defined(op, "out", out);
  require_defined(op, "in", in);
  require_same_numel(op, "out", out, "in", in);
  if (out.dtype() != in.dtype())
    fail(op, ": out is ", dtype_name(out.dtype()), " but in is ", dtype_name(in.dtype()),
         "; convert with Tensor::cast");
}

void add(Context&, Tensor& out, const Tensor& a, const Tensor& b) {
  require_f32_pair("add", "out", out, "a", a);
  require_f32_pair("add", "out", out, "b", b);
}

void add_relu(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  const char* op = "add_relu";
  require_map_dtype(op, "out", out, ctx);
  require_f32(op, "a", a);
  require_map_dtype(op, "b", b, ctx);
  require_same_numel(op, "out", out, "a", a);
  require_same_numel(op, "out", out, "b", b);
}

void axpy(Context&, Tensor& y, float, const Tensor& x) { require_f32_pair("axpy", "y", y, "x", x); }

void scale(Context&, Tensor& x, float) { require_f32("scale", "x", x); }

void cast(Context&, Tensor& out, const Tensor& in, float) {
  const char* op = "cast";
  require_defined(op, "out", out);
  require_defined(op, "in", in);
  require_same_numel(op, "out", out, "in", in);
  auto floating = [](DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; };
  if (!floating(out.dtype()) || !floating(in.dtype()) || (out.dtype() != DType::f32 && in.dtype() != DType::f32))
    fail(op, ": converts f32 to bf16 or f16 and back (or f32 to f32), not ", dtype_name(in.dtype()), " to ",
         dtype_name(out.dtype()));
}

void count_nonfinite(Context&, const Tensor& x) { require_f32("count_nonfinite", "x", x); }

void count_nonfinite_into(Context&, Tensor& count, const Tensor& x) {
  require_f32("count_nonfinite_into", "x", x);
  require_elements("count_nonfinite_into", "count", count, DType::i64, 1);
}

void increment_i64(Context&, Tensor& counter) {
  require_elements("increment_i64", "counter", counter, DType::i64, 1);
}

void poison_if_nonfinite(Context&, Tensor& x, const Tensor& value) {
  require_f32("poison_if_nonfinite", "x", x);
  require_elements("poison_if_nonfinite", "value", value, DType::f32, 1);
}

// ==== matrix products

void linear_forward(Context&, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b) {
  const char* op = "linear_forward";
  const auto [N, in, out] = linear_sizes(op, x, w);
  require_f32_shape(op, "y", y, {N, out});
  if (b && b->defined()) require_f32_shape(op, "b", *b, {out});
}

void linear_backward(Context&, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                     const Tensor& x, const Tensor& w, DxMode) {
  const char* op = "linear_backward";
  const auto [N, in, out] = linear_sizes(op, x, w);
  require_f32_shape(op, "dy", dy, {N, out});
  if (dx) require_f32_shape(op, "dx", *dx, {N, in});
  if (dw) require_f32_shape(op, "dw", *dw, {out, in});
  if (db) require_f32_shape(op, "db", *db, {out});
}

void matmul(Context&, Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
            float, float) {
  const char* op = "matmul";
  require_f32(op, "a", a);
  require_f32(op, "b", b);
  require_f32(op, "c", c);
  if (a.dim() < 2 || a.dim() != b.dim() || a.dim() != c.dim())
    fail(op, ": a ", shape_str(a.shape()), ", b ", shape_str(b.shape()), " and c ",
         shape_str(c.shape()), " must have the same number (>= 2) of dimensions");
  for (int i = 0; i < a.dim() - 2; ++i)
    if (a.size(i) != b.size(i) || a.size(i) != c.size(i))
      fail(op, ": leading dimensions differ: a ", shape_str(a.shape()), ", b ",
           shape_str(b.shape()), ", c ", shape_str(c.shape()));
  const int64_t M = trans_a ? a.size(-1) : a.size(-2), K = trans_a ? a.size(-2) : a.size(-1);
  const int64_t Kb = trans_b ? b.size(-1) : b.size(-2), N = trans_b ? b.size(-2) : b.size(-1);
  if (K != Kb || c.size(-2) != M || c.size(-1) != N)
    fail(op, ": op(a) ", M, "x", K, " times op(b) ", Kb, "x", N, " does not fit c ",
         shape_str(c.shape()), " (a ", shape_str(a.shape()), trans_a ? "^T" : "", ", b ",
         shape_str(b.shape()), trans_b ? "^T" : "", ")");
}

// ==== convolution
void conv2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b,
                    const Conv2dParams& p) {
  const char* op = "conv2d_forward";
  const Shape out = conv_output(op, x, w, p, ctx);
  require_map_dtype(op, "y", y, ctx);
  require_shape(op, "y", y, out);
  if (b && b->defined()) require_f32_shape(op, "b", *b, {w.size(0)});
  if (p.epilogue != Epilogue::none && p.epilogue != Epilogue::relu)
    fail(op, ": epilogue ", epilogue_name(p.epilogue), " is not offered (a convolution folds in a ReLU only)");
}

void conv2d_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                     const Tensor& x, const Tensor& w, const Conv2dParams& p, DxMode dx_mode) {
  const char* op = "conv2d_backward";
  const Shape out = conv_output(op, x, w, p, ctx);
  require_map_dtype(op, "dy", dy, ctx);
  require_shape(op, "dy", dy, out);
  if (dx) {  // in half precision for a ReLU before the convolution, written over
    require_map_dtype(op, "dx", *dx, ctx);
    require_shape(op, "dx", *dx, x.shape());
    if (dx->dtype() != DType::f32 && dx_mode != DxMode::overwrite)
      fail(op, ": a ", dtype_name(dx->dtype()), " dx is written over (DxMode::overwrite), never added to");
  }
  if (dw) require_f32_shape(op, "dw", *dw, w.shape());
  if (db) require_f32_shape(op, "db", *db, {w.size(0)});
}

// ==== pooling
void max_pool2d_forward(Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x,
                        const Pool2dParams& p) {
  const char* op = "max_pool2d_forward";
  require_map_dtype(op, "x", x, ctx);
  const Shape out = pool_output(op, x, p);
  require_map_dtype(op, "y", y, ctx);
  require_shape(op, "y", y, out);
  require_dtype(op, "argmax", argmax, DType::i32);
  require_shape(op, "argmax", argmax, out);
}

void max_pool2d_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& argmax, const Pool2dParams& p,
                         DxMode dx_mode) {
  const char* op = "max_pool2d_backward";
  require_map_dtype(op, "dx", dx, ctx);  // in half precision where a ReLU after a convolution reads it
  if (dx.dtype() != DType::f32 && dx_mode != DxMode::overwrite)
    fail(op, ": a ", dtype_name(dx.dtype()), " dx is written over (DxMode::overwrite), never added to");
  require_map_dtype(op, "dy", dy, ctx);  // in half precision where the convolution after gives it
  require_dim(op, "dx", dx, 4);
  require_dim(op, "dy", dy, 4);
  require_dtype(op, "argmax", argmax, DType::i32);
  require_shape(op, "argmax", argmax, dy.shape());
  const ImageDims i = image_dims(dx.shape(), p.format), o = image_dims(dy.shape(), p.format);
  if (i.n != o.n || i.c != o.c)
    fail(op, ": dx ", shape_str(dx.shape()), " and dy ", shape_str(dy.shape()),
         " must agree on N and C");
  // dy is the pooled shape of dx under the forward's parameters.
  require_shape(op, "dy", dy, pool_output(op, dx, p));
}

void avg_pool2d_forward(Context&, Tensor& y, const Tensor& x, const Pool2dParams& p) {
  const char* op = "avg_pool2d_forward";
  require_f32(op, "x", x);
  require_f32_shape(op, "y", y, pool_output(op, x, p));
}

void avg_pool2d_backward(Context&, Tensor& dx, const Tensor& dy, const Pool2dParams& p, DxMode) {
  const char* op = "avg_pool2d_backward";
  require_f32(op, "dx", dx);
  require_f32_shape(op, "dy", dy, pool_output(op, dx, p));
}

void adaptive_avg_pool2d_forward(Context&, Tensor& y, const Tensor& x, MemoryFormat format) {
  const char* op = "adaptive_avg_pool2d_forward";
  check_adaptive(op, "x", x, "y", y, format);
  const ImageDims d = image_dims(x.shape(), format);
  if (y.numel() != 0 && (d.h == 0 || d.w == 0))
    fail(op, ": empty input ", shape_str(x.shape()), ": every output bin needs at least one pixel");
}

void adaptive_avg_pool2d_backward(Context&, Tensor& dx, const Tensor& dy, MemoryFormat format, DxMode) {
  check_adaptive("adaptive_avg_pool2d_backward", "dx", dx, "dy", dy, format);
}

// ==== batch normalisation
void batch_norm_forward_train(Context& ctx, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                              Tensor& running_mean, Tensor& running_var, const Tensor& x,
                              const Tensor& gamma, const Tensor& beta, float, float, Tensor* batches_tracked,
                              Epilogue) {
  const char* op = "batch_norm_forward_train";
  if (batches_tracked) require_elements(op, "batches_tracked", *batches_tracked, DType::i64, 1);
  const int64_t C = bn_prefix(op, "y", y, x, ctx);
  require_channels(op,
                   {{"save_mean", &save_mean}, {"save_invstd", &save_invstd},
                    {"running_mean", &running_mean}, {"running_var", &running_var},
                    {"gamma", &gamma}, {"beta", &beta}},
                   C);
  int64_t per_channel = x.size(0);  // N * H * W ...
  for (int d = 2; d < x.dim(); ++d) per_channel *= x.size(d);
  if (per_channel <= 1)
    fail(op, ": expected more than 1 value per channel when training, got input ",
         shape_str(x.shape()));
}

void batch_norm_forward_eval(Context& ctx, Tensor& y, const Tensor& x, const Tensor& gamma,
                             const Tensor& beta, const Tensor& running_mean,
                             const Tensor& running_var, float, Epilogue) {
  const char* op = "batch_norm_forward_eval";
  const int64_t C = bn_prefix(op, "y", y, x, ctx);
  require_channels(op,
                   {{"gamma", &gamma}, {"beta", &beta}, {"running_mean", &running_mean},
                    {"running_var", &running_var}},
                   C);
}

void batch_norm_backward(Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                         const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                         const Tensor& save_invstd, DxMode, const Tensor* relu_out, const Tensor* silu_beta) {
  const char* op = "batch_norm_backward";
  // dy f32 or in half precision where the convolution after gives it (bn_prefix's map dtype).
  const int64_t C = bn_prefix(op, "dy", dy, x, ctx);
  require_channels(op,
                   {{"gamma", &gamma}, {"save_mean", &save_mean}, {"save_invstd", &save_invstd},
                    {"dgamma", dgamma}, {"dbeta", dbeta}},
                   C);
  if (dx) {  // x's dtype: a half-precision x has its gradient rounded to the same
    require_dtype(op, "dx", *dx, x.dtype());
    require_shape(op, "dx", *dx, x.shape());
  }
  if (relu_out && silu_beta) fail(op, ": relu_out and silu_beta given together (a forward applies one epilogue)");
  if (relu_out) {  // the ReLU's output, f32 or (before a convolution) in the compute's half type
    require_map_dtype(op, "relu_out", *relu_out, ctx);
    require_shape(op, "relu_out", *relu_out, dy.shape());
  }
  if (silu_beta) require_f32_shape(op, "silu_beta", *silu_beta, {C});
}

// ==== activations and regularisation
void relu_forward(Context&, Tensor& y, const Tensor& x) { require_f32_pair("relu_forward", "y", y, "x", x); }

void relu_backward(Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode dx_mode) {
  const char* op = "relu_backward";
  require_map_dtype(op, "dy", dy, ctx);  // in half precision where the convolution after gives it
  require_map_dtype(op, "dx", dx, ctx);  // in half precision where the convolution before takes it
  if (dx.dtype() != DType::f32 && dx_mode != DxMode::overwrite)
    fail(op, ": a ", dtype_name(dx.dtype()), " dx is written over (DxMode::overwrite), never added to");
  require_same_numel(op, "dx", dx, "dy", dy);
  require_map_dtype(op, "y", y, ctx);  // in half precision where a convolution read it next
  require_same_numel(op, "dy", dy, "y", y);
}

namespace {
// ctx.random_offset, when set, is one i64 on the op's device.
void check_random_offset(const char* op, const Context& ctx) {
  if (!ctx.random_offset) return;
  const Tensor& o = *ctx.random_offset;
  require_dtype(op, "ctx.random_offset", o, DType::i64);
  if (o.numel() != 1 || o.device() != ctx.device)
    fail(op, ": ctx.random_offset must be one i64 on ", ctx.device.str(), ", not ", shape_str(o.shape()), " on ",
         o.device().str());
}
}  // namespace

void dropout_forward(Context& ctx, Tensor& y, Tensor& mask, const Tensor& x, float p, uint64_t,
                     uint64_t) {
  const char* op = "dropout_forward";
  check_random_offset(op, ctx);
  check_dropout_p(op, p);
  require_f32_pair(op, "y", y, "x", x);
  require_dtype(op, "mask", mask, DType::u8);
  require_same_numel(op, "mask", mask, "x", x);
}

void bernoulli_scale(Context& ctx, Tensor& out, float keep, uint64_t, uint64_t) {
  const char* op = "bernoulli_scale";
  check_random_offset(op, ctx);
  require_f32(op, "out", out);
  if (!(keep >= 0.f && keep <= 1.f)) fail(op, ": keep = ", keep, " is not a probability in [0, 1]");
}

void dropout_backward(Context&, Tensor& dx, const Tensor& dy, const Tensor& mask, float p) {
  const char* op = "dropout_backward";
  check_dropout_p(op, p);
  require_f32_pair(op, "dx", dx, "dy", dy);
  require_dtype(op, "mask", mask, DType::u8);
  require_same_numel(op, "mask", mask, "dy", dy);
}

void sigmoid_forward(Context&, Tensor& y, const Tensor& x) {
  require_f32_pair("sigmoid_forward", "y", y, "x", x);
}
void sigmoid_backward(Context&, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode) {
  require_unary_backward("sigmoid_backward", dx, dy, "y", y);
}
void silu_forward(Context&, Tensor& y, const Tensor& x) { require_f32_pair("silu_forward", "y", y, "x", x); }
void silu_backward(Context&, Tensor& dx, const Tensor& dy, const Tensor& x, DxMode) {
  require_unary_backward("silu_backward", dx, dy, "x", x);
}
void gelu_forward(Context&, Tensor& y, const Tensor& x) { require_f32_pair("gelu_forward", "y", y, "x", x); }
void gelu_backward(Context&, Tensor& dx, const Tensor& dy, const Tensor& x, DxMode) {
  require_unary_backward("gelu_backward", dx, dy, "x", x);
}

// ==== broadcasting elementwise
void add_broadcast(Context&, Tensor& out, const Tensor& a, const Tensor& b) {
  check_broadcast_binary("add_broadcast", out, a, b);
}

void add_broadcast_backward(Context&, Tensor* da, Tensor* db, const Tensor& dy) {
  const char* op = "add_broadcast_backward";
  require_f32(op, "dy", dy);
  if (dy.dim() > plan::kMaxBroadcastDims)
    fail(op, ": dy ", shape_str(dy.shape()), " has more than ", plan::kMaxBroadcastDims, " dimensions");
  if (da) check_broadcasts(op, "da", *da, "dy", dy.shape());
  if (db) check_broadcasts(op, "db", *db, "dy", dy.shape());
}

void mul_broadcast(Context&, Tensor& out, const Tensor& a, const Tensor& b) {
  check_broadcast_binary("mul_broadcast", out, a, b);
}

void mul_broadcast_backward(Context&, Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                            const Tensor& b) {
  const char* op = "mul_broadcast_backward";
  require_f32(op, "dy", dy);
  check_broadcasts(op, "a", a, "dy", dy.shape());
  check_broadcasts(op, "b", b, "dy", dy.shape());
  if (da) {
    check_broadcasts(op, "da", *da, "dy", dy.shape());
    require_shape(op, "da", *da, a.shape());
  }
  if (db) {
    check_broadcasts(op, "db", *db, "dy", dy.shape());
    require_shape(op, "db", *db, b.shape());
  }
}

// ==== normalisation over the last dimension, softmax
void layer_norm_forward(Context&, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                        const Tensor& gamma, const Tensor& beta, float eps) {
  const char* op = "layer_norm_forward";
  const int64_t D = ln_features(op, x, gamma, mean, rstd);
  require_f32_shape(op, "y", y, x.shape());
  require_f32_shape(op, "beta", beta, {D});
  if (!(eps > 0.f)) fail(op, ": eps ", eps, " must be positive");
}

void layer_norm_backward(Context&, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                         const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, DxMode) {
  const char* op = "layer_norm_backward";
  const int64_t D = ln_features(op, x, gamma, mean, rstd);
  require_f32_shape(op, "dy", dy, x.shape());
  if (dx) require_f32_shape(op, "dx", *dx, x.shape());
  if (dgamma) require_f32_shape(op, "dgamma", *dgamma, {D});
  if (dbeta) require_f32_shape(op, "dbeta", *dbeta, {D});
}

void softmax_forward(Context&, Tensor& y, const Tensor& x, const Tensor* bias) {
  const char* op = "softmax_forward";
  require_f32(op, "x", x);
  require_f32_shape(op, "y", y, x.shape());
  require_last_dim(op, "x", x);
  if (bias && bias->defined()) {
    require_f32(op, "bias", *bias);
    const int bd = bias->dim();
    bool trailing = bd >= 1 && bd <= x.dim();
    for (int d = 1; trailing && d <= bd; ++d) trailing = bias->size(-d) == x.size(-d);
    if (!trailing)
      fail(op, ": bias ", shape_str(bias->shape()),
           " must have the shape of the trailing dimensions of x ", shape_str(x.shape()));
  }
}

void softmax_backward(Context&, Tensor& dx, const Tensor& dy, const Tensor& y, DxMode) {
  const char* op = "softmax_backward";
  require_f32(op, "dx", dx);
  require_f32(op, "dy", dy);
  require_f32(op, "y", y);
  require_shape(op, "dy", dy, y.shape());
  require_shape(op, "dx", dx, y.shape());
  require_last_dim(op, "y", y);
}

// ==== layout: permute, roll, pad, concatenate, gather
void permute(Context&, Tensor& out, const Tensor& in, const std::vector<int>& perm) {
  require_f32("permute", "in", in);
  require_f32("permute", "out", out);
  (void)plan::permute_plan("permute", "in", in.shape(), "out", out.shape(), perm);
}

void permute_backward(Context&, Tensor& din, const Tensor& dout, const std::vector<int>& perm, DxMode) {
  require_f32("permute_backward", "din", din);
  require_f32("permute_backward", "dout", dout);
  (void)plan::permute_plan("permute_backward", "din", din.shape(), "dout", dout.shape(), perm);
}

void roll(Context&, Tensor& out, const Tensor& in, int64_t, int64_t) {
  require_map("roll", "in", in);
  require_f32_shape("roll", "out", out, in.shape());
}

void roll_backward(Context&, Tensor& din, const Tensor& dout, int64_t, int64_t) {
  require_map("roll_backward", "dout", dout);
  require_f32_shape("roll_backward", "din", din, dout.shape());
}

void pad_hw(Context&, Tensor& out, const Tensor& in) { require_padded("pad_hw", "out", out, "in", in); }

void pad_hw_backward(Context&, Tensor& din, const Tensor& dout) {
  require_padded("pad_hw_backward", "dout", dout, "din", din);
}

namespace {

// windows (B, nH, nW, wh, ww, C) must cover x (B, H, W, C): nH wh >= H and nW ww >= W.
void check_windows(const char* op, const Tensor& windows, const Tensor& x, const char* x_name) {
  require_f32(op, "windows", windows);
  require_f32(op, x_name, x);
  require_dim(op, "windows", windows, 6);
  require_dim(op, x_name, x, 4);
  if (windows.size(0) != x.size(0) || windows.size(5) != x.size(3) ||
      windows.size(1) * windows.size(3) < x.size(1) || windows.size(2) * windows.size(4) < x.size(2))
    fail(op, ": windows ", shape_str(windows.shape()), " (B, nH, nW, wh, ww, C) must cover ", x_name, " ",
         shape_str(x.shape()), " (B, H, W, C): the same B and C, nH wh >= H and nW ww >= W");
}

}  // namespace

void window_partition(Context&, Tensor& windows, const Tensor& x, int64_t, int64_t) {
  check_windows("window_partition", windows, x, "x");
}

void window_merge(Context&, Tensor& y, const Tensor& windows, int64_t, int64_t, DxMode) {
  check_windows("window_merge", windows, y, "y");
}

void concat_channels(Context&, Tensor& out, const std::vector<Tensor>& inputs) {
  std::vector<const Tensor*> parts;
  for (const Tensor& t : inputs) parts.push_back(&t);
  check_parts("concat_channels", "out", out, "input", parts);
}

void split_channels_backward(Context&, const std::vector<Tensor*>& dinputs, const Tensor& dout) {
  const char* op = "split_channels_backward";
  std::vector<const Tensor*> parts;
  for (const Tensor* t : dinputs) {
    // Each gradient's shape says which channels are its, so none may be missing.
    if (!t) fail(op, ": dinput ", parts.size(), " is null; pass every input's gradient");
    parts.push_back(t);
  }
  check_parts(op, "dout", dout, "dinput", parts);
  // Each gradient is added to in parallel with the others: two that share memory would race.
  for (size_t i = 0; i < parts.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const auto* a = static_cast<const char*>(parts[i]->raw());
      const auto* b = static_cast<const char*>(parts[j]->raw());
      if (a < b + parts[j]->nbytes() && b < a + parts[i]->nbytes())
        fail(op, ": dinputs ", j, " and ", i, " share memory (an input concatenated twice?); give each its own "
             "gradient tensor and add them afterwards");
    }
}

void copy_channels(Context&, Tensor& dst, int64_t dst_channel, const Tensor& src, int64_t src_channel,
                   int64_t channels, DxMode) {
  const char* op = "copy_channels";
  require_f32(op, "dst", dst);
  require_f32(op, "src", src);
  bool ok = dst.dim() >= 2 && src.dim() == dst.dim() && src.size(0) == dst.size(0);
  for (int d = 2; ok && d < dst.dim(); ++d) ok = src.size(d) == dst.size(d);
  if (!ok)
    fail(op, ": src ", shape_str(src.shape()), " does not fit dst ", shape_str(dst.shape()),
         ": both (N, C, ...) with all but dimension 1 alike");
  if (channels < 0 || dst_channel < 0 || src_channel < 0 || dst_channel > dst.size(1) - channels ||
      src_channel > src.size(1) - channels)
    fail(op, ": channels [", src_channel, ", ", src_channel + channels, ") of src ", shape_str(src.shape()),
         " to [", dst_channel, ", ", dst_channel + channels, ") of dst ", shape_str(dst.shape()),
         ": out of their channels");
  if (dst.numel() == 0 || src.numel() == 0) return;
  const auto* d = static_cast<const char*>(dst.raw());
  const auto* s = static_cast<const char*>(src.raw());
  if (d < s + src.numel() * 4 && s < d + dst.numel() * 4)
    fail(op, ": dst and src share memory; copy between two tensors");
}

void index_select(Context&, Tensor& out, const Tensor& table, const Tensor& index) {
  check_gather("index_select", "table", table, "out", out, index);
}

void index_select_backward(Context&, Tensor& dtable, const Tensor& dout, const Tensor& index) {
  check_gather("index_select_backward", "dtable", dtable, "dout", dout, index);
}

// ==== loss
void cross_entropy_forward(Context&, Tensor& loss, Tensor& probs, const Tensor& logits,
                           const Tensor& labels, float label_smoothing) {
  const char* op = "cross_entropy_forward";
  check_logits_labels(op, "logits", logits, labels);
  check_smoothing(op, label_smoothing);
  if (logits.numel() == 0) fail(op, ": logits ", shape_str(logits.shape()), " is empty");
  require_f32_shape(op, "probs", probs, logits.shape());
  require_f32(op, "loss", loss);
  if (loss.numel() != 1) fail(op, ": loss must hold 1 element, has shape ", shape_str(loss.shape()));
}

void cross_entropy_backward(Context&, Tensor& dlogits, const Tensor& probs, const Tensor& labels,
                            float label_smoothing, float) {
  const char* op = "cross_entropy_backward";
  check_logits_labels(op, "probs", probs, labels);
  check_smoothing(op, label_smoothing);
  require_f32_shape(op, "dlogits", dlogits, probs.shape());
}

void count_correct(Context&, const Tensor& logits, const Tensor& labels) {
  check_logits_labels("count_correct", "logits", logits, labels);
}

// ==== optimizer
namespace {
// An optimizer op's optional tensors (ops.def): `scalars` f32 of `count` elements, `skip` one i64.
// Recorded into a CUDA graph, an update must take its scalars from the device: the values its
// arguments give would be frozen at the recording (a learning rate that a schedule changes).
void check_update_tensors(const char* op, const Tensor* scalars, int64_t count, const Tensor* skip) {
  if (scalars) {
    require_elements(op, "scalars", *scalars, DType::f32, count);
  } else if (capture::active()) {
    const std::string what = detail::concat(op, "'s learning rate comes from the host, and a recording would keep the "
                                            "one it saw (give the op its scalars on the device)");
    capture::not_capturable(what.c_str());
  }
  if (skip) require_elements(op, "skip", *skip, DType::i64, 1);
}
}  // namespace

void sgd_step(Context&, Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p, bool,
              const Tensor* scalars, const Tensor* skip) {
  const char* op = "sgd_step";
  require_f32_pair(op, "param", param, "grad", grad);
  // The same rule (and wording) as torch.optim.SGD's constructor.
  if (p.nesterov && (p.momentum <= 0.f || p.dampening != 0.f))
    fail(op, ": Nesterov momentum requires a momentum and zero dampening (momentum ", p.momentum,
         ", dampening ", p.dampening, ")");
  if (p.momentum != 0.f) require_f32_pair(op, "momentum_buf", momentum_buf, "param", param);
  check_update_tensors(op, scalars, 1, skip);
}

void adamw_step(Context&, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                const AdamwParams& p, int64_t step, const Tensor* scalars, const Tensor* skip) {
  const char* op = "adamw_step";
  require_f32_pair(op, "param", param, "grad", grad);
  require_f32_pair(op, "exp_avg", exp_avg, "param", param);
  require_f32_pair(op, "exp_avg_sq", exp_avg_sq, "param", param);
  if (!scalars) (void)adamw_scalars(p, step);  // the hyper-parameters and step
  check_update_tensors(op, scalars, kAdamwScalars, skip);
}

}  // namespace dpx::ops::check
