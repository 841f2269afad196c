// Every zoo model on the GPU against the same model on the CPU: an eval forward, then one
// training step (forward, cross-entropy, backward, SGD with Nesterov momentum) from the same
// weights, input and seed. Dropout and stochastic depth draw the same Philox masks on both
// devices, so the two runs compute the same function; only the summation order differs
// (cuBLAS/cuDNN against Eigen/im2col), and every comparison is norm-wise.
#include <doctest/doctest.h>

#include <algorithm>

#include "layers/loss.hpp"
#include "layers/model.hpp"
#include "layers/optim.hpp"
#include "tests/cuda/gpu_test_util.hpp"
#include "zoo/registry.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

// fp32 on both sides, no TF32. Deep random networks amplify rounding (resnet152's torchvision
// fp32 logits are 3e-4 from float64 on noise input at 224): the tolerances leave room for that
// amplification at this small input, not for a wrong kernel, which shows up as O(1).
constexpr double kLogitsTol = 1e-4, kLossTol = 1e-5, kGradTol = 1e-3, kParamTol = 1e-5;

}  // namespace

TEST_CASE("every zoo model: an eval forward and one training step on the GPU match the CPU") {
  Context c = cpu(), g = gpu();
  for (const zoo::ModelInfo& info : zoo::registry()) {
    CAPTURE(info.name);
    zoo::ModelOptions o;
    o.num_classes = 10;
    o.in_channels = info.default_in_channels;
    o.image_size = std::max(info.min_image_size, 32);
    o.seed = 11;
    nn::Model host(zoo::build_model(info.name, o));
    nn::Model device = host.clone(dev());
    Tensor x = uniform({2, o.in_channels, o.image_size, o.image_size}, 3);
    Tensor y = random_labels(2, o.num_classes, 4);
    Tensor gx = x.to(dev()), gy = y.to(dev());

    host.eval();
    device.eval();
    const double logits = norm_rel_diff(device.forward(g, gx).to(Device::cpu()), host.forward(c, x));
    CHECK(logits <= kLogitsTol);

    host.train();
    device.train();
    nn::CrossEntropyLoss loss_c, loss_g;
    const ops::SgdParams sgd{.lr = 0.01f, .momentum = 0.9f, .nesterov = true};
    nn::SGD opt_c(host, sgd), opt_g(device, sgd);
    host.zero_grad(c);
    device.zero_grad(g);
    const float lc = loss_c.forward(c, host.forward(c, x), y);
    const float lg = loss_g.forward(g, device.forward(g, gx), gy);
    host.backward(c, loss_c.backward(c));
    device.backward(g, loss_g.backward(g));
    const double grads = norm_rel_diff(device.flat_grads().to(Device::cpu()), host.flat_grads());
    opt_c.step(c);
    opt_g.step(g);
    const double params = norm_rel_diff(device.flat_params().to(Device::cpu()), host.flat_params());
    MESSAGE(info.name << " at " << o.image_size << ": logits " << logits << ", loss " << lc << " vs " << lg
                      << ", gradients " << grads << ", parameters after the step " << params);
    CHECK(rel_diff(lg, lc) <= kLossTol);
    CHECK(grads <= kGradTol);
    CHECK(params <= kParamTol);
  }
}
