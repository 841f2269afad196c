// The flags of `dpx train` and `dpx bench` (see train_flags.hpp), and the parsing, once, of those
// that name one of a few choices into TrainOptions' enums.
#include "tools/train_flags.hpp"

#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/output_files.hpp"
#include "core/version_config.hpp"
#include "kernels/cpu/conv2d_algos.hpp"
#include "parallel/comm/algorithms/algorithms.hpp"
#include "zoo/registry.hpp"

namespace dpx::tools {

std::string algo_help() { return "all-reduce algorithm for ddp: " + parallel::algorithm_choices(); }

void add_train_flags(CLI::App& cmd, parallel::TrainOptions& o, TrainFlags& f, bool for_bench) {
  if (!for_bench) {
    cmd.add_option("--model", o.model, "model to train: " + zoo::model_names())->capture_default_str();
    cmd.add_option("--batch-size,-b", o.batch_size, "global batch size (split over the ranks)")->capture_default_str();
    cmd.add_option("--devices", o.devices,
                   "cpu:K (K thread ranks in this process), ref:K (the same ranks running the plain reference "
                   "kernels of kernels/ref/: slow, for teaching and checking), cuda:N (one GPU), or cuda:0,cuda:1 "
                   "(a rank per GPU: --parallel ddp --backend nccl, or --parallel dp); under mpirun/srun every "
                   "process is one rank (mpirun -np K sets K; with --backend nccl pass --devices cuda: each process "
                   "drives its local rank's GPU)")
        ->capture_default_str();
    cmd.add_option("--parallel", f.parallel,
                   "none, dp (DataParallel) or ddp (DistributedDataParallel); default: ddp under mpirun/srun with "
                   "several processes, else none");
    cmd.add_option("--backend", f.backend,
                   parallel::kNcclBuilt
                       ? "nccl: DDP over GPUs with NCCL's all-reduce (--devices cuda:0,cuda:1, or cuda under mpirun; "
                         "compiled, not yet run on GPUs); p2p: DDP over GPU replicas with dpx's algorithms over device "
                         "copies, several replicas on one GPU allowed (--devices cuda:0,cuda:0; run on one H100, "
                         "benchmarks/RESULTS.md); default: threads for thread ranks, mpi under mpirun"
                       : "nccl and p2p need a build with -DDPX_CUDA=ON; default: threads for thread ranks, mpi under "
                         "mpirun");
    cmd.add_option("--epochs", o.epochs, "epochs to train")->capture_default_str();
    cmd.add_option("--out", o.out_dir, "directory for steps.csv, summary.csv, config.json (created if missing)")
        ->check(output_path());
    cmd.add_option("--trace", o.trace_file, "write a Chrome trace (open in Perfetto) of --trace-steps")
        ->check(output_path());
    cmd.add_option("--trace-steps", f.trace_steps, "global steps a:b to trace")->capture_default_str();
    cmd.add_option("--memory-budget", f.memory_budget,
                   "the most host memory the allocator may hold (16GB, 512MB, 1.5GiB): past it, it gives cached "
                   "blocks back before it asks for more, and a convolution's Winograd scratch stays within an eighth "
                   "of it (else the direct convolution runs), as dpx bench --batch-sizes max searched under it "
                   "(default: no limit)");
    cmd.add_flag("--profile-ops", f.profile_ops,
                 "time every op (kernels/ops.def) of the steps after --warmup: a table at the end and ops.csv in "
                 "--out; with --trace each op of the traced steps is a span on its rank's ops track");
    cmd.add_flag_callback("--profile-shapes", [&f] { f.profile_ops = f.profile_shapes = true; },
                          "--profile-ops with each op's calls counted apart per shape (the tensors' shapes and the "
                          "convolution's or pooling's stride, padding, dilation and groups), as torch.profiler's "
                          "record_shapes: a row per op and shape in the table and in ops.csv's shape column");
    cmd.add_option("--weights", o.weights_file,
                   "start from this safetensors state_dict (torchvision names, e.g. a torchvision model's "
                   "weights); with --head the file's classifier is left out");
    cmd.add_flag("--weights-non-strict", f.weights_non_strict,
                 "load the --weights that fit; list the missing and unexpected names instead of failing");
    cmd.add_option("--save", o.save_file, "write the final weights (rank 0's) to this safetensors file")
        ->check(output_path());
    cmd.add_option("--checkpoint-dir", o.checkpoint_dir,
                   "write checkpoints into this folder: at the end of every epoch, every --checkpoint-every "
                   "steps, and when a signal stops the run")
        ->check(output_path());
    cmd.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints (0: at epoch ends only)")
        ->capture_default_str();
    cmd.add_option("--keep", o.keep_checkpoints, "how many of the newest checkpoints to keep")->capture_default_str();
    cmd.add_option("--resume", o.resume,
                   "continue the run a checkpoint was made of, bit for bit: a checkpoint file, a --checkpoint-dir "
                   "(its newest), or auto: --checkpoint-dir's newest checkpoint if it has one, else start from the "
                   "first step (one job script for a run and its requeues)");
  }
  auto mark = [](bool& given) { return [&given](const std::string&) { given = true; }; };
  // Mixed precision (docs/data-parallelism.md, Mixed precision); bench sweeps a list of --grad-dtype.
  cmd.add_option("--precision", f.precision,
                 "compute precision: fp32; tf32 (GPUs: as --tf32); bf16 or fp16 (GPUs: convolutions and matrix "
                 "products on tensor cores with operands rounded to it and fp32 accumulation; bf16 needs Ampere or "
                 "newer; fp16 scales the loss dynamically by default). Weights, optimizer and other ops stay fp32")
      ->capture_default_str();
  if (!for_bench)
    cmd.add_option("--grad-dtype", f.grad_dtype, kGradDtypeHelp)->capture_default_str();
  cmd.add_option("--loss-scale", f.loss_scale,
                 "multiply the loss by a scale before backward and divide the gradients by it after the "
                 "all-reduce: auto (dynamic with --grad-dtype fp16 or --precision fp16, else none), dynamic (as PyTorch's GradScaler: "
                 "inf/NaN gradients skip the update and halve the scale; it doubles after --loss-scale-window "
                 "good updates), none, or a constant")
      ->capture_default_str();
  cmd.add_option("--initial-loss-scale", o.initial_loss_scale, "dynamic loss scaling: the first scale")
      ->capture_default_str()
      ->each(mark(f.loss_scale_tuning_given));
  cmd.add_option("--loss-scale-window", o.loss_scale_window,
                 "dynamic loss scaling: updates in a row without inf/NaN gradients before the scale doubles")
      ->capture_default_str()
      ->each(mark(f.loss_scale_tuning_given));
  cmd.add_option("--on-nonfinite", f.on_nonfinite,
                 "a NaN or infinite loss or gradient: stop (the default: an error naming the rank, step and first "
                 "parameter), skip (the update, on every rank), or ignore (no check); with dynamic loss scaling, "
                 "inf/NaN gradients of a finite loss are the scaler's to skip, and this applies to the loss")
      ->capture_default_str();
  cmd.add_option("--head", o.head,
                 "classifier: default (the model's own), linear (one new Linear) or mlp4096 (new Linear 4096, "
                 "ReLU, Dropout, Linear 4096, ReLU, Dropout, Linear)")
      ->capture_default_str();
  cmd.add_flag("--freeze-backbone", o.freeze_backbone,
               "train only the classifier: no gradients, updates or communication for the rest (batch norm "
               "statistics still update in training mode, as in PyTorch)");
  cmd.add_option("--dataset", o.dataset,
                 "fashion-mnist, mnist, synthetic, imagefolder (a folder of JPEG and PNG files in torchvision's "
                 "ImageFolder layout: DIR/<class>/, or DIR/train/<class>/ and DIR/val/<class>/) or tinyimagenet "
                 "(TinyImageNet-200's own layout)")
      ->capture_default_str();
  cmd.add_option("--data-dir", o.data_dir,
                 "directory with the IDX files (default for fashion-mnist: $DPX_DATA_DIR, then the "
                 "dataset-fashion-mnist package's), or the image folder (dpx data make-imagefolder makes one)");
  cmd.add_option("--image-size", o.image_size,
                 "resize images to SxS (0: the data set's own size; image folders: 224, tinyimagenet: 64); image "
                 "folders are cropped and resized as torchvision's ImageNet transforms")
      ->capture_default_str();
  add_image_flags(cmd, o.images, f.images);
  cmd.add_option("--channels", o.channels, "image channels (1 = grey; 3 replicates grey to RGB; 0: the data set's)")
      ->capture_default_str();
  cmd.add_option("--synthetic-size", o.synthetic_size, "samples in the synthetic training set")->capture_default_str();
  cmd.add_option("--classes", o.num_classes, "classes of the synthetic data set")->capture_default_str();
  cmd.add_option("--steps", o.max_steps, "steps per epoch (0: the whole epoch)")->capture_default_str();
  // Which flags were given matters: an unset --lr or --weight-decay takes the optimizer's
  // default, and the other optimizer's flags are refused (apply_train_flags).
  if (!for_bench)  // bench sweeps a list of optimizers
    cmd.add_option("--optimizer", o.optimizer, kOptimizerHelp)->capture_default_str();
  cmd.add_option_function<float>(
      "--lr", [&o](const float& v) { o.lr = v; },
      "learning rate (default: 0.05 with sgd; 0.001 with adamw, torch.optim.AdamW's default)");
  cmd.add_option_function<float>(
      "--weight-decay", [&o](const float& v) { o.weight_decay = v; },
      "weight decay: sgd adds wd * param to the gradient (default 0); adamw multiplies the parameters by "
      "1 - lr * wd (default 0.01, torch.optim.AdamW's)");
  cmd.add_option("--momentum", o.momentum, "sgd only: momentum")->capture_default_str()->each(mark(f.momentum_given));
  cmd.add_flag("--nesterov,!--no-nesterov", o.nesterov, "sgd only: Nesterov momentum (on by default)")
      ->each(mark(f.nesterov_given));
  cmd.add_option("--betas", f.betas,
                 "adamw only: B1,B2, decay rates of the averages of the gradient and its square (default 0.9,0.999)");
  cmd.add_option("--eps", o.eps, "adamw only: term added to the denominator for stability")
      ->capture_default_str()
      ->each(mark(f.eps_given));
  cmd.add_option("--lr-schedule", f.lr_schedule,
                 "constant; cosine (annealed to 0 over the run); step (/10 at 50 % and 75 % of the run)")
      ->capture_default_str();
  cmd.add_option("--label-smoothing", o.label_smoothing, "cross-entropy label smoothing")->capture_default_str();
  // Unsigned options take "-1" as 2^64 - 1 without a word: refuse negative text first.
  cmd.add_option("--seed", o.seed, "seed of the initialisation, shuffling and dropout")
      ->check(non_negative())
      ->capture_default_str();
  cmd.add_option("--threads", o.threads,
                 "CPU threads in all, split over the thread ranks (0: every core); under MPI, this process's "
                 "threads (0: the cores the launcher bound it to, or an equal share of its node's cores)")
      ->capture_default_str();
  cmd.add_option("--omp-wait", f.omp_wait,
                 "how idle OpenMP threads wait (OMP_WAIT_POLICY): default (the OpenMP library's own: spin a while, "
                 "then sleep; or what OMP_WAIT_POLICY says), active (spin: 1.1x faster with several threads per rank "
                 "on a quiet machine), passive (sleep at once: 1.5x faster when another process is busy on the "
                 "cores). benchmarks/RESULTS.md, OpenMP wait")
      ->check(CLI::IsMember({"default", "active", "passive"}))
      ->capture_default_str();
  if (!for_bench)  // bench sweeps a list of them
    cmd.add_option("--workers", o.workers,
                   "data-loader threads per rank, reading, decoding and augmenting ahead of the steps (0: load in the "
                   "training thread)")
        ->capture_default_str();
  if (!for_bench)
    cmd.add_option("--algo", f.algo, algo_help())
        ->capture_default_str();
  cmd.add_option("--net-sim", o.net_sim,
                 "RATE,LATENCY: every exchange of DDP's thread ranks takes at least latency + bytes / rate, really "
                 "waiting, as on that network (e.g. 10gbit,5us or 1GB,50us; units bit kbit mbit gbit tbit, B kB MB "
                 "GB TB per second; ns us ms s)");
  cmd.add_option("--comm-timeout", o.comm_timeout_s,
                 "seconds a rank may wait in one collective before it prints a stall report and ends the job")
      ->capture_default_str();
  cmd.add_option("--ranks-per-node", o.ranks_per_node,
                 "for --algo hier: take each group of this many consecutive ranks as one node (0: the real nodes; "
                 "thread ranks are all on one)")
      ->capture_default_str();
  if (!for_bench) {  // bench sweeps lists of these
    cmd.add_option("--bucket-mb", o.bucket_mb, kBucketMbHelp)->capture_default_str();
    cmd.add_option("--accumulate", o.accumulate, kAccumulateHelp)->capture_default_str();
  }
  cmd.add_flag("--no-overlap", f.no_overlap, "DDP: all-reduce after backward instead of during it");
  cmd.add_flag("--pin-threads", o.pin_threads, "pin rank r to core r");
  cmd.add_flag("--tf32", o.allow_tf32, "allow TF32 tensor-core math for fp32 on GPUs (off: exact fp32)");
  cmd.add_flag("--deterministic", o.deterministic,
               "GPUs: two runs give identical weights: cuDNN's deterministic convolution algorithms only, and no "
               "float atomics (max-pool and index_select backward); slower. CPU runs are deterministic anyway");
  cmd.add_option("--conv-algo", o.conv_algo, kConvAlgoHelp)
      ->check(CLI::IsMember({"auto", "search", "onednn", "winograd", "dpx"}))
      ->capture_default_str();
  cmd.add_option("--cudnn-algo", o.cudnn_algo,
                 "GPUs: how each convolution shape's cuDNN algorithm is chosen: heuristic (cuDNN's ranking, as "
                 "PyTorch's default) or search (every candidate timed once per shape with the workspace it asks "
                 "for, up to half the GPU's free memory, as PyTorch's cudnn.benchmark = True; the first steps are "
                 "slower)")
      ->check(CLI::IsMember({"heuristic", "search"}))
      ->capture_default_str();
  cmd.add_option("--memory-format", f.memory_format,
                 "how the model's image maps lie in memory: contiguous (N, C, H, W) or channels_last (N, H, W, C), "
                 "as PyTorch's model.to(memory_format=...): on GPUs cuDNN's tensor-core convolutions take "
                 "channels_last without transposing; on CPUs it is a checking mode (each convolution and pooling "
                 "runs between two permutes, slower). Every convolutional family (not swin); weights keep their "
                 "layout")
      ->capture_default_str();
  cmd.add_flag("--cuda-graph", o.cuda_graph,
               "GPUs (one rank, or DDP over --backend nccl): after a shape's first (eager) step, record forward, "
               "loss, backward, DDP's NCCL all-reduces and the optimizer's update as a CUDA graph and replay it "
               "each step with one launch (phases are still timed); refused with loss scaling, --parallel dp and "
               "--backend p2p");
  cmd.add_flag("--verbose", o.verbose, "also print the algorithm each CPU convolution shape runs, and why");
  cmd.add_option("--warmup", o.warmup_steps, "steps excluded from the summaries")->capture_default_str();
  cmd.add_option("--loss-threshold", o.loss_threshold, "report the first step whose loss is below this")
      ->capture_default_str();
  cmd.add_option("--log-interval", o.log_interval_s, "seconds between progress lines")->capture_default_str();
  cmd.add_flag("--no-eval", f.no_eval, "skip the test-set evaluation after each epoch");
  cmd.add_flag("--force", f.force,
               "replace output files that exist and were not written by dpx (or are links: the link is replaced, its "
               "target left alone); without it such a file is refused and left as it is");
}

namespace {
// "B1,B2" -> two floats; anything else is a usage error.
void parse_betas(const std::string& text, float& beta1, float& beta2) {
  auto comma = text.find(',');
  auto to_float = [&](const std::string& part, float& out) {
    char* end = nullptr;
    out = std::strtof(part.c_str(), &end);
    return !part.empty() && end == part.c_str() + part.size();
  };
  if (comma == std::string::npos || !to_float(text.substr(0, comma), beta1) ||
      !to_float(text.substr(comma + 1), beta2))
    usage_fail("--betas '", text, "': use B1,B2, e.g. 0.9,0.999");
}
}  // namespace

void apply_train_flags(parallel::TrainOptions& o, const TrainFlags& f) {
  if (!f.betas.empty()) parse_betas(f.betas, o.beta1, o.beta2);
  apply_image_flags(o.images, f.images);
  // The other optimizer's flags would be silently ignored: refuse them instead.
  if (o.optimizer == "adamw" && (f.momentum_given || f.nesterov_given))
    usage_fail("--momentum and --nesterov/--no-nesterov apply to --optimizer sgd only; "
               "AdamW's decay rates of its moments are --betas B1,B2");
  if (o.optimizer == "sgd" && (!f.betas.empty() || f.eps_given))
    usage_fail("--betas and --eps apply to --optimizer adamw only; pass --optimizer adamw, or --momentum for sgd");
  // The options that name one of a few choices, parsed here, once.
  using namespace parallel;
  if (!f.backend.empty()) o.backend = parse_choice(kBackends, f.backend, "--backend", "backend");
  // The default algorithm with --backend nccl is NCCL's own, the backend's one.
  o.algo = o.backend == Backend::nccl && f.algo == "ring" ? Algorithm::nccl
                                                          : with_flag("--algo", [&] { return parse_algorithm(f.algo); });
  o.precision = parse_choice(kPrecisions, f.precision, "--precision", "precision");
  o.memory_format = parse_choice(kMemoryFormats, f.memory_format, "--memory-format", "memory format");
  o.grad_dtype = parse_choice(kGradDtypes, f.grad_dtype, "--grad-dtype", "dtype");
  o.loss_scale = parse_loss_scale(f.loss_scale);
  o.on_nonfinite = parse_choice(kNonFinite, f.on_nonfinite, "--on-nonfinite", "choice");
  o.lr_schedule = parse_choice(kLrSchedules, f.lr_schedule, "--lr-schedule", "schedule");
  o.parallel = !f.parallel.empty()   ? parse_choice(kParallelModes, f.parallel, "--parallel", "mode")
               : o.process_ranks > 1 ? ParallelMode::ddp
                                     : ParallelMode::none;
  if (f.loss_scale_tuning_given) {
    const std::optional<parallel::LossScaleOptions> scaling = o.loss_scaling();
    if (!scaling || !scaling->dynamic)
      usage_fail("--initial-loss-scale and --loss-scale-window tune dynamic loss scaling, which --loss-scale ",
                 f.loss_scale, " with --grad-dtype ", f.grad_dtype, " does not use: pass --loss-scale dynamic");
  }
  if (o.precision == Precision::tf32) o.allow_tf32 = true;  // on CUDA; refused on CPU by validate()
  o.overlap = !f.no_overlap;
  o.evaluate = !f.no_eval;
  o.weights_strict = !f.weights_non_strict;
  cpu::ConvAlgo algo{};
  if (!cpu::parse_conv_algo(o.conv_algo, algo)) usage_fail("--conv-algo '", o.conv_algo, "': use auto, search, onednn, winograd or dpx");
  if (algo != cpu::ConvAlgo::automatic && algo != cpu::ConvAlgo::dpx && !cpu::onednn_available())
    usage_fail("--conv-algo ", o.conv_algo, ": this dpx was built without oneDNN (apt-get install libdnnl-dev and rebuild, "
               "or use --conv-algo dpx or auto)");
  cpu::set_conv_algo(algo);
  auto colon = f.trace_steps.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    o.trace_first = std::stoll(f.trace_steps.substr(0, colon));
    o.trace_last = std::stoll(f.trace_steps.substr(colon + 1));
  } catch (const std::exception&) {
    usage_fail("--trace-steps '", f.trace_steps, "': use a:b, e.g. 10:20");
  }
}

void check_train_outputs(const parallel::TrainOptions& o, const TrainFlags& f) {
  std::vector<FlagPath> outputs;
  std::vector<FileKind> kinds;
  auto output = [&](const std::string& path, FileKind kind, const char* flag) {
    if (path.empty()) return;
    outputs.push_back({flag, path});
    kinds.push_back(kind);
  };
  if (!o.out_dir.empty()) {
    output(o.out_dir + "/steps.csv", FileKind::steps_csv, "--out");
    output(o.out_dir + "/summary.csv", FileKind::summary_csv, "--out");
    output(o.out_dir + "/config.json", FileKind::config_json, "--out");
    if (f.profile_ops) output(o.out_dir + "/ops.csv", FileKind::ops_csv, "--out");
  }
  output(o.trace_file, FileKind::trace_json, "--trace");
  output(o.save_file, FileKind::weights, "--save");
  std::error_code ec;
  const bool resume_file = !o.resume.empty() && o.resume != "auto" && std::filesystem::is_regular_file(o.resume, ec);
  // An input named as an output first (the more specific message), then each file's kind.
  check_outputs_distinct(outputs, {{"--weights", o.weights_file}, {"--resume", resume_file ? o.resume : ""}});
  for (size_t i = 0; i < outputs.size(); ++i) check_output_file(outputs[i].path, kinds[i], outputs[i].flag.c_str(), f.force);
}

void apply_omp_wait(int argc, char** argv) {
  std::string policy;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--omp-wait" && i + 1 < argc) policy = argv[i + 1];
    else if (arg.rfind("--omp-wait=", 0) == 0) policy = arg.substr(11);
  }
  if (policy != "active" && policy != "passive") return;  // default, none, or a value the parser refuses
  const std::string want = policy == "active" ? "ACTIVE" : "PASSIVE";
  const char* now = std::getenv("OMP_WAIT_POLICY");
  if (now && strcasecmp(now, want.c_str()) == 0) return;
  setenv("OMP_WAIT_POLICY", want.c_str(), 1);
  execv("/proc/self/exe", argv);
  // Not reached unless exec failed: the OpenMP library keeps its policy; say so and go on.
  std::fprintf(stderr, "dpx: warning: --omp-wait %s: could not restart dpx with OMP_WAIT_POLICY=%s (%s); OpenMP keeps "
               "its default wait policy: set OMP_WAIT_POLICY=%s in the environment instead\n", policy.c_str(),
               want.c_str(), std::strerror(errno), want.c_str());
}

CLI::Validator output_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? "an empty path names no file or folder: give one (\".\" for the current folder)" : "";
      },
      "PATH");
}

CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const size_t first = text.find_first_not_of(" \t");
        return first != std::string::npos && text[first] == '-' ? text + " is negative: give a whole number of 0 or more"
                                                                 : "";
      },
      "NONNEGATIVE");
}

parallel::StartReport start_report(const std::string& command,
                                   std::vector<std::pair<std::string, std::string>> options) {
  parallel::StartReport r;
  r.options = {{"command", command}, {"dpx version", DPX_VERSION_STRING}};
  r.options.insert(r.options.end(), options.begin(), options.end());
  return r;
}

}  // namespace dpx::tools
