// Conv2dNormActivation, _make_divisible and MBConv, built as torchvision builds them; MBConv's
// backward joins the residual's two paths when the block has one.
#include "layers/mbconv.hpp"

#include <algorithm>

#include "layers/activation.hpp"
#include "layers/batch_norm.hpp"
#include "layers/conv2d.hpp"
#include "layers/layer_util.hpp"
#include "layers/residual.hpp"
#include "layers/squeeze_excitation.hpp"
#include "layers/stochastic_depth.hpp"

namespace dpx::nn {

std::unique_ptr<Sequential> conv_norm_activation(int64_t in_channels, int64_t out_channels, int kernel,
                                                 int stride, int groups, std::unique_ptr<Module> activation,
                                                 const NormOptions& norm, Rng& rng) {
  auto s = std::make_unique<Sequential>();
  // torchvision: padding (k - 1) / 2 * dilation, and no conv bias when a norm layer follows.
  s->emplace<Conv2d>(in_channels, out_channels, kernel, rng, stride, (kernel - 1) / 2, 1, groups, false);
  s->emplace<BatchNorm2d>(out_channels, norm.eps, norm.momentum);
  if (activation) s->add(std::move(activation));
  return s;
}

int64_t make_divisible(double v, int64_t divisor) {
  int64_t rounded = std::max<int64_t>(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (rounded < 0.9 * v) rounded += divisor;
  return rounded;
}

MBConv::MBConv(const MBConvConfig& cnf, float stochastic_depth_prob, Rng& rng, const NormOptions& norm)
    : cnf_(cnf), use_res_(cnf.stride == 1 && cnf.input_channels == cnf.out_channels) {
  if (cnf.stride < 1 || cnf.stride > 2) fail(describe(), ": illegal stride ", cnf.stride, " (1 or 2)");
  if (cnf.input_channels < 1 || cnf.out_channels < 1 || cnf.kernel < 1 || cnf.expand_ratio <= 0)
    fail(describe(), ": channels, kernel and expand ratio must be positive");
  auto block = std::make_unique<Sequential>();
  const int64_t expanded = make_divisible(cnf.input_channels * cnf.expand_ratio, 8);
  if (expanded != cnf.input_channels)
    block->add(
        conv_norm_activation(cnf.input_channels, expanded, 1, 1, 1, std::make_unique<SiLU>(), norm, rng));
  block->add(conv_norm_activation(expanded, expanded, cnf.kernel, cnf.stride, static_cast<int>(expanded),
                                  std::make_unique<SiLU>(), norm, rng));
  const int64_t squeeze = std::max<int64_t>(1, cnf.input_channels / 4);
  block->add(std::make_unique<SqueezeExcitation>(expanded, squeeze, rng, std::make_unique<SiLU>()));
  block->add(conv_norm_activation(expanded, cnf.out_channels, 1, 1, 1, nullptr, norm, rng));
  add_module("block", std::move(block));
  add_module("stochastic_depth", std::make_unique<StochasticDepth>(stochastic_depth_prob, "row", rng));
}

std::string MBConv::describe() const {
  return detail::concat("MBConv(", cnf_.input_channels, " -> ", cnf_.out_channels, ", expand ",
                        cnf_.expand_ratio, ", kernel ", cnf_.kernel, ", stride ", cnf_.stride, ")");
}

Tensor MBConv::forward(Context& ctx, const Tensor& x) {
  if (x.dim() != 4 || x.size(channels_last_ ? 3 : 1) != cnf_.input_channels)
    fail(describe(), " given input ", shape_str(x.shape()), ": expected ",
         expected_maps(cnf_.input_channels, channels_last_));
  Tensor r = child(0).forward(ctx, x);
  if (!use_res_) return r;
  return residual_add(ctx, x, child(1).forward(ctx, r), describe());
}

Tensor MBConv::backward(Context& ctx, const Tensor& dy) {
  if (!use_res_) return child(0).backward(ctx, dy);
  return residual_backward(ctx, child(0).backward(ctx, child(1).backward(ctx, dy)), dy);
}

}  // namespace dpx::nn
