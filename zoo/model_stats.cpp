// measure_model: the live host bytes before and after one training forward whose output is
// dropped are exactly the tensors the layers cached; the FLOPs are summed over the modules.
#include "zoo/model_stats.hpp"

#include "core/error.hpp"
#include "core/rng.hpp"

namespace dpx::zoo {

ModelStats measure_module(nn::Module& root, int in_channels, int image_size, Context& ctx) {
  if (!ctx.device.is_cpu()) usage_fail("activation memory is measured on the host; use a CPU context");
  ModelStats s;
  s.image_size = image_size;
  s.in_channels = in_channels;
  for (auto& [name, p] : root.named_parameters()) {
    s.parameters += p->value.numel();
    if (p->requires_grad) s.trainable += p->value.numel();
  }
  root.train();
  root.clear_cache();  // what an earlier forward left would be freed below and count negative
  Tensor x = Tensor::zeros({1, in_channels, image_size, image_size});
  const size_t before = host_bytes_in_use();
  root.forward(ctx, x);  // the output is dropped here: what stays alive is what layers cached
  s.activation_bytes = static_cast<int64_t>(host_bytes_in_use()) - static_cast<int64_t>(before);
  s.forward_flops = root.last_forward_flops();
  for (auto& [name, m] : root.named_modules()) s.forward_flops += m->last_forward_flops();
  root.clear_cache();
  return s;
}

ModelStats measure_model(const ModelInfo& info, const ModelOptions& options, Context& ctx) {
  // The weights' values change none of the counts: zeros, without drawing them (core/rng.hpp).
  std::unique_ptr<nn::Module> root;
  {
    DrawNothing zeros;
    root = build_model(info.name, options);
  }
  return measure_module(*root, options.in_channels, options.image_size, ctx);
}

}  // namespace dpx::zoo
