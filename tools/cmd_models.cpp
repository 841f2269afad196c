// `dpx models`: every registered model with its parameters (all and trainable), forward GFLOPs
// and activation memory per image at its default input, measured by building it and running one
// training forward (zoo/model_stats.hpp); --csv writes the same rows, --list only the registry.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/output_files.hpp"
#include "zoo/heads.hpp"
#include "zoo/model_stats.hpp"
#include "tools/commands.hpp"
#include "tools/train_flags.hpp"
#include "tools/print.hpp"
#include "zoo/registry.hpp"

namespace dpx::tools {

namespace {

struct ModelsFlags {
  std::vector<std::string> names;  // empty: every registered model
  std::string csv;
  int classes = 1000, image_size = 0, threads = 0;
  std::string head = "default";
  bool freeze_backbone = false, list_only = false;
  bool force = false;  // --force: replace a --csv that dpx did not write
};

// 11689512 -> "11,689,512"
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::vector<const zoo::ModelInfo*> selected(const ModelsFlags& f) {
  std::vector<const zoo::ModelInfo*> out;
  if (f.names.empty())
    for (const auto& m : zoo::registry()) out.push_back(&m);
  for (const auto& n : f.names) out.push_back(&zoo::find_model(n));
  return out;
}

void list_registry(const std::vector<const zoo::ModelInfo*>& models) {
  std::printf("%-16s %-13s %9s %5s  %s\n", "model", "family", "input", "min", "note");
  for (const auto* m : models) {
    std::string input = std::to_string(m->default_in_channels) + "x" + std::to_string(m->default_image_size) + "x" +
                        std::to_string(m->default_image_size);
    std::printf("%-16s %-13s %9s %5d  %s\n", m->name.c_str(), m->family.c_str(), input.c_str(), m->min_image_size,
                m->note.c_str());
  }
}

void run_models(const ModelsFlags& f) {
  if (f.classes < 1) usage_fail("--classes must be at least 1 (got ", f.classes, ")");
  if (f.image_size < 0) usage_fail("--image-size must be positive, or 0 for each model's default (got ", f.image_size, ")");
  if (f.threads < 0) usage_fail("--threads must be >= 0 (0 = every core; got ", f.threads, ")");
  if (!f.csv.empty()) {
    check_output_file(f.csv, FileKind::models_csv, "--csv", f.force);
    ensure_writable_dir(std::filesystem::path(f.csv).parent_path().string(), "--csv");
  }
  auto models = selected(f);
  if (f.list_only) {
    list_registry(models);
    return;
  }
  const int threads = f.threads > 0 ? f.threads : hardware_threads();
  Context ctx = Context::cpu(threads);
  std::printf("# %d classes, head %s%s; each model at its default input unless --image-size; batch 1 on %d CPU "
              "thread(s)\n",
              f.classes, f.head.c_str(), f.freeze_backbone ? ", backbone frozen" : "", threads);
  std::printf("# GFLOPs: floating-point operations of one forward per image, counted as 2 per multiply-add of every\n"
              "#   convolution and Linear layer and of the attention products q k^T and attn v (bias, normalisation,\n"
              "#   activations, pooling, softmax and additions are not counted)\n"
              "# act MiB: host memory one training-mode forward of one image leaves alive for backward (measured)\n");
  std::printf("%-16s %-13s %13s %13s %9s %11s %9s\n", "model", "family", "params", "trainable", "GFLOPs", "input",
              "act MiB");
  std::ostringstream csv;
  csv << "model,family,parameters,trainable_parameters,forward_gflops,in_channels,image_size,"
         "activation_bytes_per_image\n";
  for (const auto* m : models) {
    zoo::ModelOptions o;
    o.num_classes = f.classes;
    o.in_channels = m->default_in_channels;
    o.image_size = f.image_size > 0 ? f.image_size : m->default_image_size;
    o.head = f.head;
    o.freeze_backbone = f.freeze_backbone;
    zoo::ModelStats s = zoo::measure_model(*m, o, ctx);
    const double gflops = static_cast<double>(s.forward_flops) / 1e9;
    const double mib = static_cast<double>(s.activation_bytes) / (1024.0 * 1024.0);
    std::string input = std::to_string(s.in_channels) + "x" + std::to_string(s.image_size) + "x" +
                        std::to_string(s.image_size);
    std::printf("%-16s %-13s %13s %13s %9.3f %11s %9.1f\n", m->name.c_str(), m->family.c_str(),
                grouped(s.parameters).c_str(), grouped(s.trainable).c_str(), gflops, input.c_str(), mib);
    std::fflush(stdout);
    char g[32];
    std::snprintf(g, sizeof g, "%.6f", gflops);
    csv << m->name << "," << m->family << "," << s.parameters << "," << s.trainable << "," << g << ","
        << s.in_channels << "," << s.image_size << "," << s.activation_bytes << "\n";
  }
  if (!f.csv.empty()) {
    write_file_atomic(f.csv, csv.str(), "--csv");
    std::printf("wrote %s\n", f.csv.c_str());
  }
}

}  // namespace

void add_models_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "models", "list the models: parameters, trainable parameters, forward GFLOPs and activation memory per image");
  auto f = std::make_shared<ModelsFlags>();
  cmd->add_option("names", f->names, "models to measure (default: all of them; --list names them)");
  cmd->add_option("--csv", f->csv, "also write the rows to this CSV file")->check(output_path());
  cmd->add_flag("--force", f->force,
                "replace a --csv file that exists and was not written by dpx models (or is a link: the link is "
                "replaced, its target left alone)");
  cmd->add_option("--classes", f->classes, "number of classes (1000: torchvision's parameter counts)")
      ->capture_default_str();
  cmd->add_option("--image-size", f->image_size, "input size S (SxS) for every model (0: each model's default)")
      ->capture_default_str();
  cmd->add_option("--head", f->head, "classifier: " + zoo::head_names())->capture_default_str();
  cmd->add_flag("--freeze-backbone", f->freeze_backbone, "count only the classifier as trainable");
  cmd->add_option("--threads", f->threads, "CPU threads for the measuring forward (0: every core)")
      ->capture_default_str();
  cmd->add_flag("--list", f->list_only, "only list the registry: names, families, inputs, minimum sizes, notes");
  cmd->callback([f] { run_models(*f); });
}

}  // namespace dpx::tools
