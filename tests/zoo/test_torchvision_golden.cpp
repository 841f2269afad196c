// Agreement with torchvision itself. Always: tiny Swin and EfficientNet models whose weights,
// input, logits and gradients torchvision wrote (benchmarks/pytorch/make_golden.py, files in
// tests/zoo/data/) must be reproduced. On request: the full swin_t and efficientnet_b0 at 224
// from benchmarks/pytorch/check_infer.py's files (DPX_TORCHVISION_REFERENCE=<its --dir>).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/safetensors.hpp"
#include "layers/layers.hpp"
#include "tests/zoo/zoo_test_util.hpp"
#include "zoo/efficientnet.hpp"
#include "zoo/registry.hpp"
#include "zoo/swin.hpp"
#include "zoo/weights.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

std::string data_file(const std::string& name) {
  return std::string(DPX_SOURCE_DIR) + "/tests/zoo/data/" + name;
}

// The tiny configurations make_golden.py gives torchvision.
nn::Model tiny_swin() {
  zoo::SwinConfig c{.patch_size = 4,
                    .embed_dim = 8,
                    .depths = {2, 2, 1},
                    .num_heads = {2, 2, 4},
                    .window_size = {3, 3},
                    .mlp_ratio = 4.0,
                    .stochastic_depth_prob = 0.f};
  zoo::ModelOptions o;
  o.num_classes = 5;
  o.image_size = 20;
  return nn::Model(zoo::build_swin(c, o));
}

nn::Model tiny_efficientnet() {
  zoo::EfficientNetConfig c;
  c.stages = {{{1, 3, 1, 8, 8}, 1}, {{6, 3, 2, 8, 16}, 2}, {{4, 5, 2, 16, 24}, 1}};
  c.dropout = 0.f;
  c.stochastic_depth_prob = 0.f;
  zoo::ModelOptions o;
  o.num_classes = 5;
  o.image_size = 24;
  return nn::Model(zoo::build_efficientnet(c, o));
}

// Forward in eval, then one forward and backward of sum(logits * r) in `train` mode; compares
// logits, every parameter's gradient and (after training) the running statistics.
void check_golden(nn::Model& model, const std::string& name, bool train) {
  Context ctx = Context::cpu(1);
  SafeTensors weights = read_safetensors(data_file(name + ".safetensors"));
  zoo::LoadReport report = zoo::load_state(model, weights, /*strict=*/true);
  CHECK(report.loaded == static_cast<int64_t>(weights.tensors.size()));
  SafeTensors golden = read_safetensors(data_file(name + "_golden.safetensors"));
  const Tensor& x = *golden.find("input");
  model.eval();
  Tensor logits = model.forward(ctx, x);
  const double logit_error = scaled_error(logits, *golden.find("logits"));
  MESSAGE(name << ": logits off by " << logit_error << " of their scale");
  CHECK(logit_error < 1e-5);

  model.train(train);
  model.zero_grad(ctx);
  Tensor step = model.forward(ctx, x);
  CHECK(scaled_error(step, *golden.find("logits_step")) < 1e-5);
  model.backward(ctx, *golden.find("r"));
  // Some gradients are zero in exact arithmetic (a batch norm's bias whose output only reaches
  // the loss through another batch norm in training mode, which removes every per-channel
  // mean): both sides hold rounding noise there (~1e-8), so each tensor's error is scaled by
  // its own largest entry or 1e-3 of the largest gradient in the model, whichever is larger.
  double largest = 0;
  for (const auto& slot : model.slots())
    for (float v : golden.find("grad." + slot.name)->to_vector())
      largest = std::max(largest, std::fabs(double(v)));
  double worst = 0;
  std::string where;
  for (const auto& slot : model.slots()) {
    const Tensor* want = golden.find("grad." + slot.name);
    REQUIRE_MESSAGE(want != nullptr, "no golden gradient for " << slot.name);
    const double e = scaled_error(slot.param->grad, *want, 1e-3 * largest);
    if (!(e <= worst)) worst = e, where = slot.name;
  }
  MESSAGE(name << ": gradients off by at most " << worst << " of their scale (" << where << ")");
  CHECK(worst < 1e-4);
  if (!train) return;
  int compared = 0;
  for (auto& [buffer, t] : model.root().named_buffers())
    if (const Tensor* want = golden.find("after." + buffer)) {
      CAPTURE(buffer);
      CHECK(scaled_error(*t, *want) < 1e-5);
      ++compared;
    }
  CHECK(compared > 0);
}

}  // namespace

TEST_CASE("tiny Swin matches torchvision: shifted, padded and merged windows, logits and gradients") {
  nn::Model model = tiny_swin();
  check_golden(model, "swin_tiny", /*train=*/false);
}

TEST_CASE("tiny EfficientNet matches torchvision: logits, training gradients and batch statistics") {
  nn::Model model = tiny_efficientnet();
  check_golden(model, "efficientnet_tiny", /*train=*/true);
}

TEST_CASE("load_state: strict loading names what is missing and unexpected; non-strict reports it") {
  nn::Model swin = tiny_swin();
  SafeTensors weights = read_safetensors(data_file("swin_tiny.safetensors"));
  const std::string dropped = weights.tensors.back().first;
  weights.tensors.pop_back();
  weights.tensors.emplace_back("extra.weight", Tensor::zeros({2}));
  const std::string strict_error =
      "the weights do not fit the model: 1 missing (" + dropped + "), 1 unexpected (extra.weight)";
  CHECK_THROWS_WITH_AS(zoo::load_state(swin, weights, true), doctest::Contains(strict_error.c_str()), Error);
  zoo::LoadReport r = zoo::load_state(swin, weights, false);
  CHECK(r.missing == std::vector<std::string>{dropped});
  CHECK(r.unexpected == std::vector<std::string>{"extra.weight"});
  CHECK(r.loaded == static_cast<int64_t>(weights.tensors.size()) - 1);
  // A tensor of the right name but the wrong shape is an error naming both, and nothing is loaded.
  SafeTensors eff = read_safetensors(data_file("efficientnet_tiny.safetensors"));
  const std::vector<float> before = swin.flat_params().to_vector();
  CHECK_THROWS_WITH_AS(
      zoo::load_state(swin, eff, false),
      doctest::Contains("features.0.0.weight: file has F32 (8, 3, 3, 3), model expects F32 (8, 3, 4, 4)"),
      Error);
  CHECK(swin.flat_params().to_vector() == before);
}

// Full-size agreement: run benchmarks/pytorch/check_infer.py export <model> --dir DIR for
// swin_t and efficientnet_b0, then this test with DPX_TORCHVISION_REFERENCE=DIR; it writes
// DIR/<model>.dpx_logits.safetensors for check_infer.py compare.
TEST_CASE("swin_t and efficientnet_b0 at 224 match torchvision (DPX_TORCHVISION_REFERENCE)") {
  const char* dir = std::getenv("DPX_TORCHVISION_REFERENCE");
  if (!dir) {
    MESSAGE("not run: set DPX_TORCHVISION_REFERENCE to a directory written by check_infer.py export");
    return;
  }
  Context ctx = Context::cpu(1);
  int compared = 0;
  for (const char* name : {"swin_t", "efficientnet_b0"}) {
    const std::string base = std::string(dir) + "/" + name;
    if (!std::filesystem::exists(base + ".safetensors")) continue;
    zoo::ModelOptions o;
    o.num_classes = 1000;
    nn::Model model(zoo::build_model(name, o));
    zoo::load_state(model, read_safetensors(base + ".safetensors"), /*strict=*/true);
    model.eval();
    Tensor logits = model.forward(
        ctx, read_safetensors(base + ".input.safetensors").expect("input", {1, 3, 224, 224}, DType::f32));
    write_safetensors(base + ".dpx_logits.safetensors", {{"logits", logits}});
    const double err = scaled_error(
        logits, read_safetensors(base + ".logits.safetensors").expect("logits", {1, 1000}, DType::f32));
    MESSAGE(std::string(name) << " at 224: max |dpx - torchvision| / max |torchvision| = " << err);
    CHECK(err < 1e-4);
    ++compared;
  }
  CHECK(compared > 0);
}
