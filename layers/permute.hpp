// Permute: a contiguous copy of the input with its dimensions reordered (torchvision.ops.misc.
// Permute, torch.permute). Swin turns NCHW into channels-last after its patch embedding and
// back before pooling.
#pragma once
#include <vector>

#include "layers/module.hpp"

namespace dpx::nn {

class Permute : public Cloneable<Permute> {
 public:
  explicit Permute(std::vector<int> dims);  // a permutation of 0 .. rank-1 (rank <= 6)

  Tensor forward(Context& ctx, const Tensor& x) override;    // x -> x.permute(dims)
  Tensor backward(Context& ctx, const Tensor& dy) override;  // the inverse permutation
  std::string type_name() const override { return "Permute"; }
  std::string describe() const override;
  const std::vector<int>& dims() const { return dims_; }

 private:
  std::vector<int> dims_;
  Shape x_shape_;  // forward's input shape (dy has it permuted)
};

}  // namespace dpx::nn
