// Batch normalisation over (N, C, ...) input: per channel, statistics over N and the spatial
// dimensions (torch.nn.BatchNorm2d, and BatchNorm1d for (N, C) or (N, C, L)). Training
// normalises with batch statistics and updates the running ones; eval uses the running ones.
#pragma once
#include "core/rng.hpp"
#include "kernels/ops.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

// The shared implementation; Self (BatchNorm1d or BatchNorm2d) gives clone() its type and the
// class its torch name, which is all that differs between the two.
template <class Self>
class BatchNormBase : public Cloneable<Self> {
 public:
  // Parameters "weight", "bias" (C); buffers "running_mean", "running_var" (C) f32 and
  // "num_batches_tracked" (a 0-dim i64 tensor), in torchvision's state_dict order.
  explicit BatchNormBase(int64_t num_features, float eps = 1e-5f, float momentum = 0.1f);

  Tensor forward(Context& ctx, const Tensor& x) override;    // (N, C, ...) -> (N, C, ...)
  // forward, with the op's epilogue applied to the output, for the activation that follows
  // (nn::forward_children): Epilogue::relu gives max(BN(x), 0), Epilogue::silu BN(x) *
  // sigmoid(BN(x)), in the same pass. backward then takes dy of the activation's output: it
  // needs x and the statistics (and beta), never the output. `y_dtype`: the output's, f32 or,
  // for a convolution that reads it next, ctx.compute's bf16/fp16 (ops.def, "half-precision maps").
  Tensor forward(Context& ctx, const Tensor& x, ops::Epilogue epilogue, DType y_dtype = DType::f32);
  Tensor backward(Context& ctx, const Tensor& dy) override;  // in the mode forward ran in
  // backward through the activation the last forward applied too, dy being that activation's
  // (nn::backward_children): relu_out is the ReLU's forward output (given exactly when that
  // forward applied Epilogue::relu); a SiLU needs nothing, its input being recomputed. In
  // training one op (batch_norm_backward's relu_out, silu_beta).
  Tensor backward(Context& ctx, const Tensor& dy, const Tensor* relu_out);
  // The same on the first C channels of a wider buffer, which is neither copied nor kept twice
  // (a DenseNet layer reads its block's buffer, layers/dense_block.hpp): forward of buf[:, :C]
  // for buf (N, Cb >= C, ...), returning (N, C, ...) in y_dtype (as forward's); its backward adds
  // dx into grad_buf[:, :C] (grad_buf buf's shape) instead of returning it, from a dy in f32 or in
  // the compute's half precision (a convolution's gradient as cuDNN gives it).
  Tensor forward_prefix(Context& ctx, const Tensor& buf, ops::Epilogue epilogue, DType y_dtype = DType::f32);
  void backward_prefix(Context& ctx, Tensor& grad_buf, const Tensor& dy, const Tensor* relu_out);
  std::string describe() const override;
  void clear_cache() override;
  // The epilogue the last forward applied (none before any forward).
  ops::Epilogue applied() const { return applied_; }

  // weight 1, bias 0, running_mean 0, running_var 1, num_batches_tracked 0 (torch's
  // reset_parameters). Deterministic: the Rng is taken only so every layer has this signature.
  void reset_parameters(Rng& rng);
  void reset_parameters();
  void reset_running_stats();

  int64_t num_features() const { return c_; }
  float eps() const { return eps_; }
  float momentum() const { return momentum_; }
  Parameter& weight() { return this->param(0); }            // (C) gamma
  Parameter& bias() { return this->param(1); }              // (C) beta
  Tensor& running_mean() { return this->buffer(0); }        // (C)
  Tensor& running_var() { return this->buffer(1); }         // (C) unbiased, as PyTorch keeps it
  Tensor& num_batches_tracked() { return this->buffer(2); } // () i64

 private:
  void check_input(const Tensor& x) const;
  Tensor forward_checked(Context& ctx, const Tensor& x, ops::Epilogue epilogue,
                         DType y_dtype = DType::f32);  // x (N, >= C, ...)
  Tensor backward_eval(Context& ctx, const Tensor& dy);
  // dy of the activation's output -> dy of this layer's, for the eval backward (the op runs the
  // training one).
  Tensor through_activation_eval(Context& ctx, const Tensor& dy, const Tensor* relu_out);
  void check_relu_out(const Tensor* relu_out) const;
  // batch_norm_backward's silu_beta: beta where the last forward applied Epilogue::silu, else null.
  const Tensor* silu_beta() { return applied_ == ops::Epilogue::silu ? &bias().value : nullptr; }

 protected:
  // Channels-last maps (N, H, W, C) are normalised as the rows (N*H*W, C) they are (BatchNorm2d).
  bool channels_last_ = false;

 private:
  int64_t c_;
  float eps_, momentum_;
  bool trained_forward_ = false;  // the mode of the last forward, which backward must follow
  ops::Epilogue applied_ = ops::Epilogue::none;  // the last forward's epilogue, which backward undoes
  Tensor x_;            // (N, C, ...): forward's input (shared, not copied; f32, or a convolution's bf16/fp16
                        // output: Conv2d::forward_to_norm); forward_prefix's buffer
  Tensor save_mean_;    // (C) batch mean of the last training forward
  Tensor save_invstd_;  // (C) 1 / sqrt(batch variance + eps) of the last training forward
};

class BatchNorm2d final : public BatchNormBase<BatchNorm2d> {
 public:
  using BatchNormBase::BatchNormBase;
  std::string type_name() const override { return "BatchNorm2d"; }
  bool set_channels_last(bool on) override {  // (N, H, W, C) -> (N, H, W, C), as rows (N*H*W, C)
    channels_last_ = on;
    return true;
  }
};

class BatchNorm1d final : public BatchNormBase<BatchNorm1d> {
 public:
  using BatchNormBase::BatchNormBase;
  std::string type_name() const override { return "BatchNorm1d"; }
};

extern template class BatchNormBase<BatchNorm2d>;
extern template class BatchNormBase<BatchNorm1d>;

}  // namespace dpx::nn
