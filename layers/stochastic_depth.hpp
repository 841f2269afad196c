// StochasticDepth (torchvision.ops.StochasticDepth): in training, drops a residual branch for
// whole samples ("row": each sample with probability p) or for the whole batch ("batch"), and
// scales survivors by 1/(1-p); identity in eval. Noise comes from the layer's own Rng stream.
#pragma once
#include <string>

#include "core/rng.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

class StochasticDepth : public Cloneable<StochasticDepth> {
 public:
  // mode "row" or "batch"; takes a stream of its own from rng (and advances rng).
  StochasticDepth(float p, const std::string& mode, Rng& rng);

  Tensor forward(Context& ctx, const Tensor& x) override;    // (N, ...) -> (N, ...)
  Tensor backward(Context& ctx, const Tensor& dy) override;  // dy scaled by forward's noise
  std::string type_name() const override { return "StochasticDepth"; }
  std::string describe() const override;
  // A factor per sample (N, 1, ..., 1): where the channels lie does not matter.
  bool set_channels_last(bool) override { return true; }
  void clear_cache() override {
    noise_ = Tensor();
    forwarded_ = false;
  }

  // One application with the noise kept by the caller: a Swin block applies its one
  // stochastic_depth to two branches, each with a draw of its own. `noise` becomes
  // (N, 1, ..., 1) for "row" or (1, ..., 1) for "batch", each entry 0 or 1/(1-p), or stays
  // undefined when the application is the identity (eval, or p == 0), which returns x itself.
  Tensor apply(Context& ctx, const Tensor& x, Tensor& noise);
  // dx = dy * noise, a fresh tensor (a copy of dy for the identity).
  Tensor apply_backward(Context& ctx, const Tensor& dy, const Tensor& noise) const;

  float p() const { return p_; }
  bool row_mode() const { return row_; }
  void reseed(const Rng& rng);               // another stream, e.g. one per replica; restarts the draws
  uint64_t steps() const { return steps_; }  // noise tensors drawn so far
  std::optional<RandomState> random_state() const override { return RandomState{rng_.seed(), rng_.stream(), steps_}; }
  void set_random_state(const RandomState& state) override {
    rng_ = Rng(state.seed, state.stream);
    steps_ = state.draws;
  }

 private:
  float p_;
  bool row_;
  Rng rng_;  // the layer's stream; draw k uses rng_.fork(k)
  uint64_t steps_ = 0;
  bool forwarded_ = false;
  Tensor noise_;  // (N, 1, ..., 1) or (1, ..., 1): the last forward's noise, if any
};

}  // namespace dpx::nn
