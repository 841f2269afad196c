// SGD over a Model's flat parameter buffer, with torch.optim.SGD semantics (momentum,
// dampening, weight decay, Nesterov). The momentum buffer is one tensor laid out like the
// model's flat buffer, so a step is a few large ops over runs of trainable parameters.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/ops.hpp"
#include "layers/model.hpp"

namespace dpx::nn {

class SGD {
 public:
  // Keeps a pointer to model: the model must outlive the optimizer and not be moved.
  SGD(Model& model, const ops::SgdParams& params);

  // One update of every parameter with requires_grad, from its gradient in model.flat_grads().
  // A parameter's first step initialises its momentum to its gradient (as PyTorch, which
  // creates the buffer then); frozen parameters are neither read nor written.
  void step(Context& ctx);

  void set_lr(float lr);
  float lr() const { return p_.lr; }
  const ops::SgdParams& params() const { return p_; }
  int64_t steps() const { return steps_; }
  // (num_parameters) laid out like model.flat_params(); undefined when momentum is 0, as
  // PyTorch keeps no buffer then.
  const Tensor& momentum_buffer() const { return momentum_; }

 private:
  Model* model_;
  ops::SgdParams p_;
  Tensor momentum_;            // (num_parameters), on the model's device
  std::vector<char> started_;  // per ParamSlot: 1 once its momentum buffer holds a value
  int64_t steps_ = 0;
};

}  // namespace dpx::nn
