// --cuda-graph's rehearsal on the CPU: every family of the zoo runs forward, loss and backward
// under a capture::Scope (core/capture.hpp), which refuses every host read a CUDA graph capture
// could not contain (item(), to_vector(), host-device copies, stream waits, ops that return a
// value to the host) and names the op and the phase. A model that passes here has no such read in
// the part of the step --cuda-graph captures; one that fails says where, before any GPU does.
#include <doctest/doctest.h>

#include <string>

#include "core/capture.hpp"
#include "layers/loss.hpp"
#include "layers/model.hpp"
#include "zoo/registry.hpp"
#include "zoo_test_util.hpp"

using namespace dpx;

TEST_CASE("every zoo family's forward, loss and backward pass a capture rehearsal on the CPU") {
  Context ctx = Context::cpu(1);
  for (const auto& [name, o] : testing::one_model_per_family()) {
    CAPTURE(name);
    nn::Model model(zoo::build_model(name, o));
    model.train();
    nn::CrossEntropyLoss loss;
    const testing::Batch b = testing::two_class_batch(2, o.in_channels, o.image_size, 3);
    model.zero_grad(ctx);  // outside the graph, as PyTorch's zero_grad before a replay
    // Twice: the first step makes what a layer keeps between steps (workspaces, caches) outside
    // any capture, as --cuda-graph's warm-up steps do; the second is the one captured.
    for (int step = 0; step < 2; ++step) {
      std::optional<capture::Scope> scope;
      if (step == 1) scope.emplace("--cuda-graph");
      std::string error;
      try {
        Tensor logits, dy;
        {
          capture::Where where("forward");
          logits = model.forward(ctx, b.x);
          (void)loss.forward_tensor(ctx, logits, b.labels);
        }
        capture::Where where("backward");
        model.backward(ctx, loss.backward(ctx));
      } catch (const capture::CaptureError& e) {
        error = e.what();
      }
      CHECK_MESSAGE(error.empty(), error);
    }
  }
}
