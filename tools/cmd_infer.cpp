// `dpx infer`: a registered model with weights from a safetensors file (torchvision's
// state_dict names) applied in eval mode to images from another, logits written as "logits"
// (N, K) to a third. benchmarks/pytorch/check_infer.py compares them with torchvision's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"
#include "core/safetensors.hpp"
#include "core/thread_check.hpp"
#include "layers/model.hpp"
#include "tools/commands.hpp"
#include "tools/train_flags.hpp"
#include "tools/print.hpp"
#include "zoo/heads.hpp"
#include "zoo/registry.hpp"
#include "zoo/weights.hpp"

namespace dpx::tools {

namespace {

struct InferFlags {
  std::string model, weights, input, output, tensor_name, head;
  int classes = 0, threads = 0;
  int64_t batch_size = 32;
  bool non_strict = false;
  bool force = false;  // --force: replace an --output that dpx did not write
};

bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

std::optional<std::string> meta(const SafeTensors& f, const std::string& key) {
  auto it = f.metadata.find(key);
  if (it == f.metadata.end()) return std::nullopt;
  return it->second;
}

int meta_int(const SafeTensors& f, const std::string& key, int fallback) {
  auto v = meta(f, key);
  if (!v) return fallback;
  try {
    size_t used = 0;
    int n = std::stoi(*v, &used);
    if (used == v->size() && n > 0) return n;
  } catch (const std::exception&) {
  }
  fail(f.path, ": metadata ", key, " = '", *v, "' is not a positive integer; pass the value as a flag instead");
}

// The images: the file's first tensor or the named one, as f32 (N, C, H, W).
std::pair<std::string, Tensor> read_images(const InferFlags& f) {
  SafeTensors file = read_safetensors(f.input);
  const Tensor* t = nullptr;
  std::string name = f.tensor_name;
  if (name.empty()) {
    if (file.tensors.empty()) fail(f.input, ": the file holds no tensors; write the images (N, C, H, W) into it");
    name = file.tensors.front().first;
    t = &file.tensors.front().second;
  } else if (!(t = file.find(name))) {
    std::string names;
    for (size_t i = 0; i < file.tensors.size() && i < 10; ++i) names += (i ? ", " : "") + file.tensors[i].first;
    if (file.tensors.size() > 10) names += ", ...";
    usage_fail(f.input, ": no tensor named '", name, "' (it holds ", file.tensors.size(), ": ", names,
               "); pass one of them to --tensor-name, or leave it out for the first");
  }
  if (!is_float(t->dtype()))
    usage_fail(f.input, ": tensor '", name, "' holds ", dtype_name(t->dtype()),
               "; infer needs floating-point images (F32, F16, BF16 or F64), normalised as the model expects");
  if (t->dim() != 4 || t->size(0) < 1)
    usage_fail(f.input, ": tensor '", name, "' has shape ", shape_str(t->shape()),
               "; infer needs a batch of images (N, C, H, W) with N >= 1 (add a batch dimension for one image)");
  return {name, t->dtype() == DType::f32 ? *t : t->cast(DType::f32)};
}


void run_infer(const InferFlags& f) {
  if (f.batch_size < 1) usage_fail("--batch-size must be at least 1 (got ", f.batch_size, ")");
  if (f.threads < 0) usage_fail("--threads must be >= 0 (0 = every core; got ", f.threads, ")");
  // The logits must never replace what was read to make them, nor a file dpx did not write.
  check_outputs_distinct({{"--output", f.output}}, {{"--input", f.input}, {"--weights", f.weights}});
  check_output_file(f.output, FileKind::weights, "--output", f.force);
  ensure_writable_dir(std::filesystem::path(f.output).parent_path().string(), "--output");
  const zoo::ModelInfo& info = zoo::find_model(f.model);
  auto [x_name, x] = read_images(f);
  SafeTensors weights = read_safetensors(f.weights);

  // The model as the weights were made: flags first, then what `dpx train --save` recorded in
  // the file's metadata, then torchvision's (1000 classes, the model's channels, its own head).
  zoo::ModelOptions o;
  o.num_classes = f.classes > 0 ? f.classes : meta_int(weights, "num_classes", 1000);
  o.in_channels = meta_int(weights, "in_channels", info.default_in_channels);
  o.head = !f.head.empty() ? f.head : meta(weights, "head").value_or("default");
  o.image_size = static_cast<int>(std::min(x.size(2), x.size(3)));
  if (x.size(1) != o.in_channels)
    usage_fail(f.input, ": tensor '", x_name, "' has ", x.size(1), " channel(s) ", shape_str(x.shape()), " but ",
               f.model, " as these weights were made takes ", o.in_channels,
               " (replicate grey images to RGB, or use weights trained on ", x.size(1), " channel(s))");
  nn::Model model(zoo::build_model(f.model, o));
  zoo::LoadReport loaded;
  try {
    loaded = zoo::load_state(model, weights, !f.non_strict);
  } catch (const Error& e) {
    fail(e.what(), " (", f.model, " was built with ", o.num_classes, " classes, ", o.in_channels,
         " channels and head ", o.head, "; pass --classes or --head as the weights were trained)");
  }
  if (f.non_strict) std::fprintf(stderr, "dpx infer: %s: %s\n", f.weights.c_str(), zoo::describe_load(loaded).c_str());
  zoo::check_finite(model, f.weights, "--weights");  // as dpx train: NaN logits say nothing

  model.eval();
  Context ctx = Context::cpu(f.threads > 0 ? f.threads : hardware_threads());
  check_threads_available(ctx.threads, detail::concat(f.threads > 0 ? "--threads " : "--threads (the default, every core: ",
                                                      ctx.threads, f.threads > 0 ? "" : ")"));
  const int64_t n = x.size(0);
  Tensor logits;
  auto start = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < n; b += f.batch_size) {
    const int64_t e = std::min(n, b + f.batch_size);
    Tensor y = model.forward(ctx, x.slice(b, e));
    if (y.dim() != 2 || y.size(0) != e - b)
      fail(f.model, " gave output ", shape_str(y.shape()), " for input ", shape_str(x.slice(b, e).shape()),
           "; expected logits (N, classes)");
    if (!logits.defined()) logits = Tensor::empty({n, y.size(1)});
    logits.slice(b, e).copy_from(y);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_safetensors(f.output, {{"logits", logits}},
                    {{"model", f.model}, {"input", x_name}, {std::string(kGeneratorKey), std::string(kGeneratorValue)}},
                    "--output");
  std::printf("%s: %lld image(s) %s -> logits (%lld, %lld) in %s (%.3f s, eval mode)\n", f.model.c_str(),
              static_cast<long long>(n), shape_str(x.shape()).c_str(), static_cast<long long>(n),
              static_cast<long long>(logits.size(1)), f.output.c_str(), seconds);
}

}  // namespace

void add_infer_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("infer", "logits of a model with safetensors weights for images in a safetensors file");
  auto f = std::make_shared<InferFlags>();
  cmd->add_option("--model", f->model, "model: " + zoo::model_names())->required();
  cmd->add_option("--weights", f->weights, "safetensors file with the model's state_dict (torchvision names)")
      ->required();
  cmd->add_option("--input", f->input, "safetensors file with images (N, C, H, W), float")->required();
  cmd->add_option("--output", f->output, "safetensors file to write the logits (N, K) into, as \"logits\"")
      ->required()
      ->check(output_path());
  cmd->add_flag("--force", f->force,
                "replace an --output file that exists and was not written by dpx (or is a link: the link is "
                "replaced, its target left alone)");
  cmd->add_option("--tensor-name", f->tensor_name, "the input tensor's name (default: the file's first)");
  cmd->add_option("--classes", f->classes, "classes K (default: the weights' metadata num_classes, else 1000)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            int k = 0;
            try {
              k = std::stoi(text);
            } catch (const std::exception&) {
              return text + " is not a number of classes";
            }
            return k >= 1 ? "" : text + " is not a number of classes: give 1 or more (or leave it out for the metadata's)";
          },
          "K >= 1"));
  cmd->add_option("--head", f->head, "classifier the weights were trained with: " + zoo::head_names() +
                                         " (default: the metadata's, else default)");
  cmd->add_flag("--non-strict", f->non_strict, "load what fits; print the missing and unexpected names");
  cmd->add_option("--batch-size,-b", f->batch_size, "images per forward")->capture_default_str();
  cmd->add_option("--threads", f->threads, "CPU threads (0: every core)")->capture_default_str();
  cmd->callback([f] { run_infer(*f); });
}

}  // namespace dpx::tools
