// Half-precision maps on the host (kernels/cpu/ and kernels/ref/): the ops that take a bf16/fp16
// map (ops.def, "half-precision maps"; the nine below) run their fp32 kernel on the maps widened,
// which is exact, and round what they write to the map's dtype, as the CUDA kernels round at
// their stores. Host runs compute in fp32
// (--precision bf16|fp16 is refused on CPU ranks): this path is the contract the CUDA kernels are
// tested against, and it lets the CPU tests run the layers that hand such maps on.
#pragma once
#include "core/tensor.hpp"
#include "kernels/ops.hpp"

namespace dpx::kernels {

inline bool is_half(const Tensor& t) { return t.defined() && (t.dtype() == DType::bf16 || t.dtype() == DType::f16); }
inline bool is_half(const Tensor* t) { return t && is_half(*t); }

// t widened to f32 (a new host tensor), or t itself when it is not half.
inline Tensor widened(const Tensor& t) { return is_half(t) ? t.cast(DType::f32) : t; }

// An f32 stand-in for an output `out`: out itself, or an f32 tensor of its shape, which finish()
// rounds back into out: out's values widened where the kernel adds into them (`reads_out`), else
// left unset.
class F32Out {
 public:
  explicit F32Out(Tensor* out, bool reads_out = true) : out_(out) {
    if (is_half(out)) f32_ = reads_out ? widened(*out) : Tensor::empty(out->shape());
  }
  Tensor* get() { return f32_.defined() ? &f32_ : out_; }
  void finish() {
    if (f32_.defined()) out_->copy_from(f32_.cast(out_->dtype()));
  }

 private:
  Tensor* out_;
  Tensor f32_;
};

// The nine ops, each through `op`, its host kernel (which then sees f32 tensors only). The
// callers test is_half first, of every map the op may take in half precision: a convolution's
// x (the ReLU's output before it), y, dy and dx; a batch norm's x, y (before a convolution), dx,
// dy (the convolution after it's dx) and relu_out; relu_backward's y, dx and dy; add_relu's out
// and b; max_pool2d_forward's x and y; max_pool2d_backward's dy and dx.
template <class Op>
void conv2d_forward_widened(Op op, Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b,
                            const ops::Conv2dParams& p) {
  F32Out out(&y, /*reads_out=*/false);
  op(ctx, *out.get(), widened(x), w, b, p);
  out.finish();
}

template <class Op>
void conv2d_backward_widened(Op op, Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                             const Tensor& x, const Tensor& w, const ops::Conv2dParams& p, ops::DxMode dx_mode) {
  F32Out out(dx, /*reads_out=*/dx_mode == ops::DxMode::add);
  op(ctx, out.get(), dw, db, widened(dy), widened(x), w, p, dx_mode);
  out.finish();
}

template <class Op>
void batch_norm_forward_train_widened(Op op, Context& ctx, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                      Tensor& running_mean, Tensor& running_var, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta, float momentum, float eps,
                                      Tensor* batches_tracked, ops::Epilogue epilogue) {
  F32Out out(&y, /*reads_out=*/false);
  op(ctx, *out.get(), save_mean, save_invstd, running_mean, running_var, widened(x), gamma, beta, momentum, eps,
     batches_tracked, epilogue);
  out.finish();
}

template <class Op>
void batch_norm_forward_eval_widened(Op op, Context& ctx, Tensor& y, const Tensor& x, const Tensor& gamma,
                                     const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                     float eps, ops::Epilogue epilogue) {
  F32Out out(&y, /*reads_out=*/false);
  op(ctx, *out.get(), widened(x), gamma, beta, running_mean, running_var, eps, epilogue);
  out.finish();
}

template <class Op>
void batch_norm_backward_widened(Op op, Context& ctx, Tensor* dx, Tensor* dgamma, Tensor* dbeta, const Tensor& dy,
                                 const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                 const Tensor& save_invstd, ops::DxMode dx_mode, const Tensor* relu_out,
                                 const Tensor* silu_beta) {
  F32Out out(dx);
  const Tensor relu32 = relu_out ? widened(*relu_out) : Tensor();
  op(ctx, out.get(), dgamma, dbeta, widened(dy), widened(x), gamma, save_mean, save_invstd, dx_mode,
     relu_out ? &relu32 : nullptr, silu_beta);
  out.finish();
}

template <class Op>
void add_relu_widened(Op op, Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  F32Out o(&out, /*reads_out=*/false);
  op(ctx, *o.get(), a, widened(b));
  o.finish();
}

template <class Op>
void max_pool2d_forward_widened(Op op, Context& ctx, Tensor& y, Tensor& argmax, const Tensor& x,
                                const ops::Pool2dParams& p) {
  F32Out out(&y, /*reads_out=*/false);
  op(ctx, *out.get(), argmax, widened(x), p);
  out.finish();
}

template <class Op>
void max_pool2d_backward_widened(Op op, Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& argmax,
                                 const ops::Pool2dParams& p, ops::DxMode dx_mode) {
  F32Out out(&dx, /*reads_out=*/dx_mode == ops::DxMode::add);
  op(ctx, *out.get(), widened(dy), argmax, p, dx_mode);
  out.finish();
}

template <class Op>
void relu_backward_widened(Op op, Context& ctx, Tensor& dx, const Tensor& dy, const Tensor& y, ops::DxMode dx_mode) {
  F32Out out(&dx, /*reads_out=*/dx_mode == ops::DxMode::add);
  op(ctx, *out.get(), widened(dy), widened(y), dx_mode);
  out.finish();
}

}  // namespace dpx::kernels
