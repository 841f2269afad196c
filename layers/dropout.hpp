// Dropout (torch.nn.Dropout): in training, zeroes each element with probability p and scales
// the rest by 1/(1-p); identity in eval. Masks come from the layer's own Rng stream, advanced
// every forward, so they differ per step yet are reproducible from the model's seed.
#pragma once
#include "core/rng.hpp"
#include "layers/module.hpp"

namespace dpx::nn {

class Dropout : public Cloneable<Dropout> {
 public:
  // Takes a stream of its own from rng (and advances rng, so sibling layers differ).
  Dropout(float p, Rng& rng);

  Tensor forward(Context& ctx, const Tensor& x) override;    // any shape -> same shape
  Tensor backward(Context& ctx, const Tensor& dy) override;  // dy masked and scaled as forward
  std::string type_name() const override { return "Dropout"; }
  std::string describe() const override;
  // Elementwise, but its mask is drawn in the order of the tensor's elements: a channels-last
  // model draws other masks than a contiguous one from the same seed.
  bool set_channels_last(bool) override { return true; }
  void clear_cache() override {
    mask_ = Tensor();
    last_ = Last::none;
  }

  float p() const { return p_; }
  // Gives this layer another stream and restarts its step count, e.g. one per replica, so
  // that replicas made by clone() do not all draw the same masks.
  void reseed(const Rng& rng);
  uint64_t steps() const { return steps_; }  // training forwards drawn so far
  std::optional<RandomState> random_state() const override { return RandomState{rng_.seed(), rng_.stream(), steps_}; }
  void set_random_state(const RandomState& state) override {
    rng_ = Rng(state.seed, state.stream);
    steps_ = state.draws;
  }

 private:
  enum class Last { none, identity, all_dropped, masked };

  float p_;
  Rng rng_;             // the layer's stream; forward k draws from rng_.fork(k)
  uint64_t steps_ = 0;
  Last last_ = Last::none;
  Shape x_shape_;
  Tensor mask_;         // like x, u8: 1 where the last forward kept the element
};

}  // namespace dpx::nn
