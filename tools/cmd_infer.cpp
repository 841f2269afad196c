// `dpx infer`: a registered model with weights from a safetensors file (torchvision's
// state_dict names) applied in eval mode to images (tools/infer_input.hpp: a safetensors tensor,
// an IDX file or JPEG/PNG files), logits written as "logits" (N, K) and the top-1 classes to a
// third file, the top-1 printed. benchmarks/pytorch/check_infer.py compares the logits with
// torchvision's.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/atomic_file.hpp"
#include "core/data/idx.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"
#include "core/safetensors.hpp"
#include "core/thread_check.hpp"
#include "layers/model.hpp"
#include "tools/commands.hpp"
#include "tools/infer_input.hpp"
#include "tools/train_flags.hpp"
#include "tools/print.hpp"
#include "zoo/heads.hpp"
#include "zoo/registry.hpp"
#include "zoo/weights.hpp"

namespace dpx::tools {

namespace {

struct InferFlags {
  std::string model, weights, output, head, normalize = "auto", mean, std, labels;
  InferInputOptions input;
  int classes = 0, threads = 0, image_size = 0, show = 10;
  int64_t batch_size = 32;
  bool non_strict = false;
  bool force = false;  // --force: replace an --output that dpx did not write
};

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

// The class names of the weights' data set (the metadata dpx train --save writes), where known:
// Fashion-MNIST's and MNIST's.
std::vector<std::string> class_names(const SafeTensors& weights, int64_t classes) {
  std::vector<std::string> names;
  if (meta(weights, "dataset") == "fashion-mnist") {
    names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  } else if (meta(weights, "dataset") == "mnist") {
    for (int d = 0; d < 10; ++d) names.push_back(std::to_string(d));
  }
  if (static_cast<int64_t>(names.size()) != classes) names.clear();
  return names;
}

// --labels: an IDX labels file (MNIST's *-labels-idx1-ubyte) or a safetensors file's "labels"
// tensor, one integer per image.
std::vector<int64_t> read_labels(const std::string& path, int64_t n) {
  Tensor t;
  if (looks_like_safetensors(path)) {
    SafeTensors file = read_safetensors(path);
    const Tensor* found = file.find("labels");
    if (!found) usage_fail("--labels '", path, "': no tensor named 'labels' (dpx data preview --tensors writes one)");
    t = *found;
  } else {
    t = data::read_idx(path);
  }
  if (t.dim() != 1 || t.size(0) != n)
    usage_fail("--labels '", path, "': ", shape_str(t.shape()), " labels for ", n, " images; pass one label per image");
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype()) {
      case DType::u8: out[static_cast<size_t>(i)] = t.data<uint8_t>()[i]; break;
      case DType::i32: out[static_cast<size_t>(i)] = t.data<int32_t>()[i]; break;
      case DType::i64: out[static_cast<size_t>(i)] = t.data<int64_t>()[i]; break;
      default: usage_fail("--labels '", path, "': ", dtype_name(t.dtype()), " labels; pass integers");
    }
  }
  return out;
}

void run_infer(InferFlags& f) {
  if (f.batch_size < 1) usage_fail("--batch-size must be at least 1 (got ", f.batch_size, ")");
  if (f.threads < 0) usage_fail("--threads must be >= 0 (0 = every core; got ", f.threads, ")");
  if (f.show < 0) usage_fail("--show must be >= 0 images (got ", f.show, ")");
  if (f.image_size < 0) usage_fail("--image-size must be positive, or 0 for the weights' (got ", f.image_size, ")");
  // The logits must never replace what was read to make them, nor a file dpx did not write.
  std::vector<FlagPath> inputs = {{"--weights", f.weights}};
  for (const std::string& p : f.input.paths) inputs.push_back({"--input", p});
  check_outputs_distinct({{"--output", f.output}}, inputs);
  check_output_file(f.output, FileKind::weights, "--output", f.force);
  ensure_writable_dir(std::filesystem::path(f.output).parent_path().string(), "--output");
  const zoo::ModelInfo& info = zoo::find_model(f.model);
  SafeTensors weights = read_safetensors(f.weights);

  // The model as the weights were made: flags first, then what `dpx train --save` recorded in
  // the file's metadata, then torchvision's (1000 classes, the model's channels, its own head).
  zoo::ModelOptions o;
  o.num_classes = f.classes > 0 ? f.classes : meta_int(weights, "num_classes", 1000);
  o.in_channels = meta_int(weights, "in_channels", info.default_in_channels);
  o.head = !f.head.empty() ? f.head : meta(weights, "head").value_or("default");
  f.input.normalize = f.normalize == "yes" ? Normalize::yes : f.normalize == "no" ? Normalize::no : Normalize::automatic;
  if (!f.mean.empty()) f.input.mean = parse_floats(f.mean, "--mean");
  if (!f.std.empty()) f.input.std = parse_floats(f.std, "--std");
  f.input.in_channels = o.in_channels;
  f.input.image_size = f.image_size > 0 ? f.image_size : meta_int(weights, "image_size", 0);
  f.input.meta_mean = meta(weights, "mean").value_or("");
  f.input.meta_std = meta(weights, "std").value_or("");
  const InferInput input = read_infer_input(f.input);
  const Tensor& x = input.images;
  // Read now: a wrong --labels file fails before the forward and before --output is written.
  const std::vector<int64_t> truth = f.labels.empty() ? std::vector<int64_t>{} : read_labels(f.labels, x.size(0));
  o.image_size = static_cast<int>(std::min(x.size(2), x.size(3)));
  if (x.size(1) != o.in_channels)
    usage_fail("--input ", input.name, " has ", x.size(1), " channel(s) ", shape_str(x.shape()), " but ", f.model,
               " as these weights were made takes ", o.in_channels,
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
  // Each image's most likely class and its softmax probability.
  const int64_t k = logits.size(1);
  Tensor top1 = Tensor::empty({n}, DType::i64);
  std::vector<double> prob(static_cast<size_t>(n));
  const float* l = logits.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = l + i * k;
    const int64_t best = std::max_element(row, row + k) - row;
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(row[j]) - row[best]);
    top1.data<int64_t>()[i] = best;
    prob[static_cast<size_t>(i)] = 1.0 / sum;
  }
  write_safetensors(f.output, {{"logits", logits}, {"top1", top1}},
                    {{"model", f.model}, {"input", input.name}, {std::string(kGeneratorKey), std::string(kGeneratorValue)}},
                    "--output");
  std::printf("%s: %lld image(s) %s from %s (%s) -> logits (%lld, %lld) and top1 in %s (%.3f s, eval mode)\n",
              f.model.c_str(), static_cast<long long>(n), shape_str(x.shape()).c_str(), input.name.c_str(),
              input.how.c_str(), static_cast<long long>(n), static_cast<long long>(k), f.output.c_str(), seconds);
  const std::vector<std::string> names = class_names(weights, k);
  const int64_t shown = std::min<int64_t>(n, f.show);
  for (int64_t i = 0; i < shown; ++i) {
    const int64_t c = top1.data<int64_t>()[i];
    std::printf("  image %lld: class %lld%s%s (p %.3f)\n", static_cast<long long>(i), static_cast<long long>(c),
                names.empty() ? "" : " ", names.empty() ? "" : names[static_cast<size_t>(c)].c_str(),
                prob[static_cast<size_t>(i)]);
  }
  if (shown < n) std::printf("  ... %lld more in %s (top1)\n", static_cast<long long>(n - shown), f.output.c_str());
  if (!f.labels.empty()) {
    int64_t right = 0;
    for (int64_t i = 0; i < n; ++i) right += top1.data<int64_t>()[i] == truth[static_cast<size_t>(i)];
    std::printf("top-1 accuracy against %s: %.2f %% (%lld of %lld)\n", f.labels.c_str(),
                100.0 * static_cast<double>(right) / static_cast<double>(n), static_cast<long long>(right),
                static_cast<long long>(n));
  }
}

}  // namespace

void add_infer_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("infer", "logits of a model with safetensors weights for images in a safetensors file");
  auto f = std::make_shared<InferFlags>();
  cmd->add_option("--model", f->model, "model: " + zoo::model_names())->required();
  cmd->add_option("--weights", f->weights, "safetensors file with the model's state_dict (torchvision names)")
      ->required();
  cmd->add_option("--input", f->input.paths,
                  "the images: a safetensors file (float (N, C, H, W), taken as normalised; or u8 pixels), an IDX "
                  "images file (MNIST's format), or JPEG/PNG files (a comma list); known by their content")
      ->required()
      ->delimiter(',');
  cmd->add_option("--normalize", f->normalize,
                  "auto: pixels (u8, IDX, JPEG/PNG) are scaled to [0, 1] and normalised with the data set's mean "
                  "and std (the weights' metadata; ImageNet's for RGB weights without), float tensors taken as "
                  "normalised; yes: normalise float [0, 1] images too; no: never")
      ->check(CLI::IsMember({"auto", "yes", "no"}))
      ->capture_default_str();
  cmd->add_option("--mean", f->mean, "the normalisation's mean, 1 value or one per channel (default: see --normalize)");
  cmd->add_option("--std", f->std, "the normalisation's std, 1 value or one per channel");
  cmd->add_option("--image-size", f->image_size,
                  "IDX images are resized, JPEG/PNG resized and centre-cropped to this (default: the weights' "
                  "metadata image_size; for JPEG/PNG else 224)");
  cmd->add_option("--show", f->show, "print the top-1 class of this many images")->capture_default_str();
  cmd->add_option("--labels", f->labels,
                  "the images' labels (an IDX labels file, or a safetensors file's \"labels\"): print the top-1 "
                  "accuracy");
  cmd->add_option("--output", f->output,
                  "safetensors file to write the logits (N, K) into, as \"logits\", and each image's top-1 class as "
                  "\"top1\" (N) i64")
      ->required()
      ->check(output_path());
  cmd->add_flag("--force", f->force,
                "replace an --output file that exists and was not written by dpx (or is a link: the link is "
                "replaced, its target left alone)");
  cmd->add_option("--tensor-name", f->input.tensor_name, "the input tensor's name (default: the file's first)");
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
