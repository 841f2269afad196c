// Optimizers over a Model's flat parameter buffer: SGD (torch.optim.SGD: momentum, dampening,
// weight decay, Nesterov) and AdamW (torch.optim.AdamW, amsgrad and maximize off). Their state
// (momentum, moments) is laid out like the model's flat buffer, so a step is a few large ops
// over runs of trainable parameters; frozen parameters are neither read nor written.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "layers/model.hpp"

namespace dpx::nn {

// What a training loop needs of an optimizer. Optimizers keep a pointer to their model: the
// model must outlive them and not be moved.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter with requires_grad, from its gradient in model.flat_grads().
  virtual void step(Context& ctx) = 0;
  // The learning rate of the next steps (a schedule sets it before each step).
  virtual void set_lr(float lr) = 0;
  virtual float lr() const = 0;
  int64_t steps() const { return steps_; }  // step() calls so far

  // Everything a resumed run needs to take the next step exactly as this optimizer would: its
  // tensors by name, copied to the host (checkpoints), and back. load_state throws a dpx::Error
  // naming what is missing or does not fit.
  virtual std::map<std::string, Tensor> state() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& state) = 0;

  // The update recorded into a CUDA graph with the rest of the step (--cuda-graph,
  // parallel/train/graph_step.hpp), where every value the host passes a kernel is frozen at the
  // recording. step() is the same update with the scalars passed from the host and no skip,
  // then count_step().
  //   recordable()   every trainable parameter has started alike (SGD: its momentum buffer;
  //                  AdamW: as many updates), so the update's ops, their ranges and arguments
  //                  stay the same at every later step and one recording serves them all;
  //   stage()        before each replay: the next update's scalars (the learning rate set_lr
  //                  gave, AdamW's bias corrections) into a tensor on the model's device;
  //   record_step()  the update's ops reading those scalars there, each skipped on the device
  //                  when `skip` (i64, one element: a count of non-finite gradients) is not zero;
  //                  const, since a recording runs its host code once;
  //   count_step()   after an update that was not skipped: what it counts on the host.
  virtual bool recordable() const = 0;
  virtual void stage(Context& ctx) = 0;
  virtual void record_step(Context& ctx, const Tensor* skip) const = 0;
  virtual void count_step() = 0;

 protected:
  int64_t steps_ = 0;
  Tensor scalars_;  // on the model's device: what stage() wrote
};

class SGD : public Optimizer {
 public:
  SGD(Model& model, const ops::SgdParams& params);

  // A parameter's first step initialises its momentum to its gradient (as PyTorch, which
  // creates the buffer then).
  void step(Context& ctx) override;
  void set_lr(float lr) override;
  float lr() const override { return p_.lr; }
  const ops::SgdParams& params() const { return p_; }
  // (num_parameters) laid out like model.flat_params(); undefined when momentum is 0, as
  // PyTorch keeps no buffer then.
  const Tensor& momentum_buffer() const { return momentum_; }
  std::map<std::string, Tensor> state() const override;  // "momentum", "started", "steps"
  void load_state(const std::map<std::string, Tensor>& state) override;
  bool recordable() const override;
  void stage(Context& ctx) override;
  void record_step(Context& ctx, const Tensor* skip) const override;
  void count_step() override;

 private:
  void update(Context& ctx, const Tensor* scalars, const Tensor* skip) const;

  Model* model_;
  ops::SgdParams p_;
  Tensor momentum_;            // (num_parameters), on the model's device
  std::vector<char> started_;  // per ParamSlot: 1 once its momentum buffer holds a value
};

class AdamW : public Optimizer {
 public:
  AdamW(Model& model, const ops::AdamwParams& params);

  // Each parameter counts its own steps from its first update, as torch's state['step'] does;
  // the moments of a parameter start at zero then.
  void step(Context& ctx) override;
  void set_lr(float lr) override;
  float lr() const override { return p_.lr; }
  const ops::AdamwParams& params() const { return p_; }
  // (num_parameters) each, laid out like model.flat_params(); zero where frozen.
  const Tensor& exp_avg() const { return exp_avg_; }
  const Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  std::map<std::string, Tensor> state() const override;  // "exp_avg", "exp_avg_sq", "slot_steps", "steps"
  void load_state(const std::map<std::string, Tensor>& state) override;
  bool recordable() const override;
  void stage(Context& ctx) override;
  void record_step(Context& ctx, const Tensor* skip) const override;
  void count_step() override;

 private:
  void update(Context& ctx, const Tensor* scalars, const Tensor* skip) const;
  std::optional<int64_t> common_steps() const;  // none where trainable parameters differ

  Model* model_;
  ops::AdamwParams p_;
  Tensor exp_avg_, exp_avg_sq_;       // (num_parameters) each, on the model's device
  std::vector<int64_t> slot_steps_;   // per ParamSlot: the updates it has had
};

}  // namespace dpx::nn
