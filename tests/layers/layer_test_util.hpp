// Helpers of the layers suite: a doctest assertion that prints a gradient check's summary when
// it fails, a toy problem every optimiser must learn (inputs: tests/common/tensors.hpp), the bytes
// a forward keeps, and the ops a piece of code calls.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "kernels/op_profile.hpp"
#include "layers/layers.hpp"
#include "tests/common/tensors.hpp"
#include "tests/layers/gradcheck.hpp"

namespace dpx::testing {

// Trains a 4-16-3 MLP 50 steps on 12 toy points in 4-D (three classes around three corners,
// plus noise) with the optimiser make_optimizer(model) returns, and checks that the loss falls
// from about log(3) to under 5 % of it and that every point ends up classified right.
template <typename MakeOptimizer>
void check_toy_mlp_learns(MakeOptimizer&& make_optimizer) {
  Context ctx = Context::cpu();
  Rng rng(2024);
  const int64_t n = 12, classes = 3;
  Tensor x = uniform({n, 4}, 1, -0.3f, 0.3f);
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    y.push_back(i % classes);
    x.data<float>()[i * 4 + i % classes] += 1.f;
  }
  Tensor labels = labels_from(y);
  nn::Model model(std::make_unique<nn::Sequential>(std::make_unique<nn::Linear>(4, 16, rng),
                                                   std::make_unique<nn::ReLU>(),
                                                   std::make_unique<nn::Linear>(16, classes, rng)));
  auto optimizer = make_optimizer(model);
  nn::CrossEntropyLoss ce;
  float first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    model.zero_grad(ctx);
    float loss = ce.forward(ctx, model.forward(ctx, x), labels);
    if (step == 0) first = loss;
    last = loss;
    model.backward(ctx, ce.backward(ctx));
    optimizer.step(ctx);
  }
  INFO("loss " << first << " -> " << last);
  CHECK(first > 0.9f);  // about log(3) at the start
  CHECK(last < 0.05f * first);
  CHECK(nn::accuracy(ctx, model.forward(ctx, x), labels) == 1.0);
}

// A forward's output and the host bytes it left alive (host_bytes_in_use before and after): what
// the model keeps for backward, the output included.
struct KeptForward {
  Tensor y;
  int64_t bytes = 0;
};
inline KeptForward forward_keeping(Context& ctx, nn::Model& model, const Tensor& x) {
  const size_t before = host_bytes_in_use();
  KeptForward k;
  k.y = model.forward(ctx, x);
  k.bytes = static_cast<int64_t>(host_bytes_in_use() - before);
  return k;
}

// The ops `run` called, by name, and how many times each (the op profiler, counting only).
template <class F>
std::map<std::string, int64_t> op_calls(F&& run) {
  ops::profile::reset();
  ops::profile::set_enabled(true);
  {
    ops::profile::Counting counting(true);
    run();
  }
  ops::profile::set_enabled(false);
  std::map<std::string, int64_t> calls;
  for (const auto& op : ops::profile::snapshot()) calls[op.name] = op.calls;
  ops::profile::reset();
  return calls;
}

}  // namespace dpx::testing

// Runs a gradient check and asserts it passed, saying where the largest error was when it did
// not; DPX_GRADCHECK_VERBOSE=1 in the environment prints every check's summary.
#define CHECK_GRADIENTS(ctx, module, x, ...)                                                     \
  do {                                                                                           \
    auto gc_result_ = ::dpx::testing::gradcheck(ctx, module, x __VA_OPT__(, ) __VA_ARGS__);      \
    CHECK_MESSAGE(gc_result_.ok(), (module).describe() << ": " << gc_result_.summary());         \
    if (std::getenv("DPX_GRADCHECK_VERBOSE"))                                                    \
      MESSAGE((module).describe() << ": " << gc_result_.summary());                              \
  } while (0)
