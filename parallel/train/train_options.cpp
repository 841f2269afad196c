#include "parallel/train/train_options.hpp"

#include "parallel/comm/nccl/nccl_backend.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"

#include <charconv>
#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>

#include "core/cuda/memory.hpp"
#include "core/error.hpp"
#include "core/gpu_status.hpp"
#include "kernels/ops.hpp"
#include "parallel/comm/algorithms/algorithms.hpp"
#include "parallel/comm/net_sim.hpp"

namespace dpx::parallel {

namespace {
constexpr int kMaxThreadsPerCore = 16;
constexpr int kMaxWorkers = 256;
}  // namespace

ParallelMode parse_parallel_mode(const std::string& s) {
  if (s == "none") return ParallelMode::none;
  if (s == "dp") return ParallelMode::dp;
  if (s == "ddp") return ParallelMode::ddp;
  usage_fail("--parallel: unknown mode '", s, "': use none, dp (DataParallel) or ddp (DistributedDataParallel)");
}

std::string parallel_mode_name(ParallelMode m) {
  switch (m) {
    case ParallelMode::none: return "none";
    case ParallelMode::dp: return "dp";
    case ParallelMode::ddp: return "ddp";
  }
  return "?";
}

Device TrainOptions::device() const {
  auto colon = devices.find(':');
  std::string kind = devices.substr(0, colon);
  if (kind == "cpu" || kind == "ref") return Device::cpu();
  if (kind != "cuda")
    usage_fail("--devices '", devices, "': use cpu:K, ref:K (K thread ranks) or cuda:N (cuda:0,cuda:1: a rank per GPU)");
  if (devices.find(',') != std::string::npos) return Device::cuda(cuda_devices().front());
  return parse_device(devices);
}

std::vector<int> TrainOptions::cuda_devices() const {
  if (devices.substr(0, devices.find(':')) != "cuda") return {};
  return parse_cuda_device_list(devices, "--devices", backend == "p2p");
}

bool TrainOptions::reference_kernels() const { return devices.substr(0, devices.find(':')) == "ref"; }

int TrainOptions::ranks() const {
  auto colon = devices.find(':');
  std::string kind = devices.substr(0, colon);
  if (process_ranks > 0) return process_ranks;
  if (kind == "cuda") return static_cast<int>(cuda_devices().size());
  if (kind != "cpu" && kind != "ref") return 1;
  if (colon == std::string::npos) return 1;
  int k = 0;
  const char* b = devices.data() + colon + 1;
  const char* e = devices.data() + devices.size();
  auto r = std::from_chars(b, e, k);
  if (r.ec != std::errc() || r.ptr != e || k < 1)
    usage_fail("--devices '", devices, "': use cpu:K or ref:K with K >= 1 thread ranks, or cuda:N");
  return k;
}

namespace {

// Under MPI a rank is a process; --devices may say "this process" (cpu, cpu:1) or the whole
// job (cpu:K with K the number of processes), nothing else.
void check_process_devices(const TrainOptions& o) {
  if (o.process_ranks == 0) return;
  if (o.backend == "nccl") {
    if (o.devices != "cuda")
      usage_fail("--devices ", o.devices, " under MPI with --backend nccl: each process drives the GPU of its local "
                 "rank; pass --devices cuda");
    return;
  }
  const int threads_asked = [&] {
    TrainOptions plain = o;
    plain.process_ranks = 0;
    return plain.ranks();
  }();
  if (o.device().is_cuda() && o.process_ranks > 1)
    usage_fail("--devices ", o.devices, " under MPI: GPU ranks in several processes communicate with NCCL: pass "
               "--backend nccl --devices cuda (each process drives its local rank's GPU)");
  if (threads_asked != 1 && threads_asked != o.process_ranks)
    usage_fail("--devices ", o.devices, " under MPI with ", o.process_ranks, " processes: each process is one rank "
               "here, so the job has ", o.process_ranks, " ranks (mpirun -np K or srun -n K sets them); cpu:K asks for "
               "K thread ranks inside one process, which is the other way to get ranks (dpx train --devices cpu:K, "
               "without mpirun). Drop --devices, or pass cpu:", o.process_ranks);
  if (o.pin_threads)
    usage_fail("--pin-threads pins thread ranks to cores; under MPI the launcher binds each process (e.g. mpirun "
               "--bind-to core, srun --cpu-bind=cores)");
  if (o.parallel == ParallelMode::dp)
    usage_fail("--parallel dp under MPI: DataParallel runs its replicas as threads of one process (a master scatters "
               "each batch to them); across processes use --parallel ddp, or run dp without mpirun (--devices cpu:K)");
  if (o.parallel == ParallelMode::none && o.process_ranks > 1)
    usage_fail("--parallel none under MPI with ", o.process_ranks, " processes: every process would train its own "
               "replica alone; pass --parallel ddp (the default under mpirun), or run one process");
}

// --backend, and data parallelism over GPUs: DDP with --backend nccl or p2p, DataParallel with
// peer copies (no backend).
void check_gpu_parallel(const TrainOptions& o) {
  const char* const built = kMpiBuilt ? "threads (thread ranks) or mpi (under mpirun)" : "threads (thread ranks)";
  if (!o.backend.empty() && o.backend != "threads" && o.backend != "mpi" && o.backend != "nccl" && o.backend != "p2p")
    usage_fail("--backend: unknown backend '", o.backend, "': use nccl or p2p (GPU ranks) or leave it out (", built, ")");
  if (o.backend == "nccl" && !kNcclBuilt)
    usage_fail("--backend nccl: not built (this dpx has no CUDA backend; configure with -DDPX_CUDA=ON on a machine "
               "with CUDA, cuDNN and NCCL, or set CUDNN_ROOT and NCCL_ROOT); train on CPU ranks with --devices cpu:K "
               "--parallel ddp instead");
  if (o.backend == "p2p" && !kP2PBuilt) usage_fail("--backend p2p: ", p2p_unavailable_reason());
  if (o.backend == "mpi" && o.process_ranks == 0)
    usage_fail("--backend mpi: every rank is a process, started by an MPI launcher: run dpx under mpirun or srun");
  if (o.backend == "threads" && o.process_ranks > 1)
    usage_fail("--backend threads under MPI: the ranks are the processes; leave --backend out");
  const bool gpus = o.device().is_cuda() || (o.backend == "nccl" && o.devices == "cuda");
  if (o.backend == "nccl") {
    if (!gpus)
      usage_fail("--backend nccl runs one rank per GPU: pass --devices cuda:0,cuda:1 (one process, a thread per GPU), "
                 "or --devices cuda under mpirun (a process per GPU)");
    if (o.parallel != ParallelMode::ddp)
      usage_fail("--backend nccl is DDP's all-reduce over GPUs: pass --parallel ddp (--parallel dp copies between GPUs "
                 "without it)");
    if (!o.net_sim.empty())
      usage_fail("--net-sim shapes the exchanges of dpx's own algorithms; NCCL's are out of its reach: drop --net-sim");
    if (o.algo != "ring" && o.algo != "nccl")
      usage_fail("--algo ", o.algo, " with --backend nccl: NCCL chooses its own algorithm (NCCL_ALGO=Ring|Tree sets "
                 "it); pass --algo nccl or leave --algo out");
    return;
  }
  if (o.backend == "p2p") {
    if (!o.device().is_cuda())
      usage_fail("--backend p2p runs thread ranks on GPUs, several on one GPU if you like: pass --devices "
                 "cuda:0,cuda:0 (two replicas on GPU 0) or cuda:0,cuda:1");
    if (o.process_ranks > 0)
      usage_fail("--backend p2p: its ranks are threads of one process; under mpirun use --backend nccl");
    if (o.parallel != ParallelMode::ddp)
      usage_fail("--backend p2p is DDP's all-reduce over GPU replicas: pass --parallel ddp");
    if (o.grad_dtype != "fp32")
      usage_fail("--grad-dtype ", o.grad_dtype, " with --backend p2p: not implemented (the p2p backend all-reduces "
                 "fp32 gradients); use --backend nccl, or drop --grad-dtype");
    if (!o.checkpoint_dir.empty())
      usage_fail("--checkpoint-dir with --backend p2p: a checkpoint gathers host memory, which the p2p backend does "
                 "not move; use --backend nccl, or leave checkpoints out");
    if (o.algo == "nccl" || o.algo == "mpi")
      usage_fail("--algo ", o.algo, " with --backend p2p: p2p runs dpx's own algorithms (ring, tree, naive, rhd, "
                 "hier)");
    return;
  }
  if (o.device().is_cuda() && o.parallel == ParallelMode::ddp)
    usage_fail("--devices ", o.devices, " with --parallel ddp: DDP over GPUs all-reduces with NCCL: add --backend nccl "
               "(or --backend p2p: dpx's algorithms over device copies, several replicas on one GPU allowed)");
  if (o.device().is_cuda() && o.parallel == ParallelMode::dp && o.cuda_devices().size() < 2)
    usage_fail("--devices ", o.devices, " with --parallel dp: DataParallel needs two GPUs or more (--devices "
               "cuda:0,cuda:1), or CPU replicas (--devices cpu:K)");
}

// --precision, --grad-dtype and the loss scaling (README.md, Mixed precision).
void check_mixed_precision(const TrainOptions& o) {
  const std::string& p = o.precision;
  if (p != "fp32" && p != "tf32" && p != "bf16" && p != "fp16")
    usage_fail("--precision: unknown precision '", p, "': use fp32, tf32, bf16 or fp16");
  if (p != "fp32" && !o.device().is_cuda())
    usage_fail("--precision ", p, " needs --devices cuda:N: dpx's CPU kernels compute in fp32 (", p,
               " is GPU tensor-core math); on CPU ranks, --grad-dtype bf16 or fp16 all-reduces the gradients in half "
               "precision");
  const std::string& g = o.grad_dtype;
  if (g != "fp32" && g != "bf16" && g != "fp16")
    usage_fail("--grad-dtype: unknown dtype '", g, "': use fp32, bf16 or fp16");
  if (g != "fp32" && o.parallel == ParallelMode::none)
    usage_fail("--grad-dtype ", g, " is the dtype of DDP's gradient all-reduce, and --parallel none has none: pass "
               "--parallel ddp (with --devices cpu:K or under mpirun), or drop --grad-dtype");
  if (g != "fp32" && o.parallel == ParallelMode::dp)
    usage_fail("--grad-dtype ", g, ": DataParallel sums its replicas' gradients through memory, in fp32, with no "
               "all-reduce to narrow; pass --parallel ddp, or drop --grad-dtype");
  if (!(o.initial_loss_scale > 0) || !std::isfinite(o.initial_loss_scale))
    usage_fail("--initial-loss-scale must be a positive number (got ", o.initial_loss_scale, ")");
  if (o.loss_scale_window < 1)
    usage_fail("--loss-scale-window must be at least 1 update (got ", o.loss_scale_window, ")");
  (void)o.loss_scaling();  // parses --loss-scale
}

}  // namespace

DType TrainOptions::compute_dtype() const {
  if (precision == "bf16") return DType::bf16;
  if (precision == "fp16") return DType::f16;
  return DType::f32;
}

void apply_math(Context& ctx, const TrainOptions& o) {
  ctx.deterministic = o.deterministic;
  if (!ctx.device.is_cuda()) return;
  ctx.allow_tf32 = o.allow_tf32;
  ctx.conv_search = o.cudnn_algo == "search";
  ctx.compute = o.compute_dtype();
  if (ctx.compute == DType::f32) return;  // fp32 and TF32 run on any GPU
  const std::string why = precision_unsupported_reason(o.precision, cuda::compute_capability(ctx.device.index),
                                                       ctx.device.index);
  if (!why.empty()) usage_fail(why);
}

DType TrainOptions::grad_wire_dtype() const {
  if (grad_dtype == "bf16") return DType::bf16;
  if (grad_dtype == "fp16") return DType::f16;
  return DType::f32;
}

std::optional<LossScaleOptions> TrainOptions::loss_scaling() const {
  LossScaleOptions dynamic{.dynamic = true, .init_scale = initial_loss_scale, .growth_interval = loss_scale_window};
  if (loss_scale == "dynamic") return dynamic;
  if (loss_scale == "none") return std::nullopt;
  if (loss_scale == "auto") {
    if (grad_dtype == "fp16" || precision == "fp16") return dynamic;
    return std::nullopt;
  }
  float scale = 0;
  const char* b = loss_scale.data();
  const char* e = b + loss_scale.size();
  auto r = std::from_chars(b, e, scale);
  if (r.ec != std::errc() || r.ptr != e || !(scale > 0) || !std::isfinite(scale))
    usage_fail("--loss-scale '", loss_scale, "': use auto (dynamic with fp16 gradients, else none), dynamic, none, "
               "or a positive constant such as 1024");
  return LossScaleOptions{.dynamic = false, .init_scale = scale};
}

void TrainOptions::validate() const {
  // NaN passes every comparison it is put through ("nan < 0" is false): refuse it first.
  const std::pair<const char*, double> reals[] = {
      {"--momentum", momentum},         {"--label-smoothing", label_smoothing}, {"--bucket-mb", bucket_mb},
      {"--loss-threshold", loss_threshold}, {"--log-interval", log_interval_s}, {"--comm-timeout", comm_timeout_s},
      {"--betas", beta1},               {"--betas", beta2},                     {"--eps", eps}};
  for (const auto& [flag, value] : reals)
    if (!std::isfinite(value)) usage_fail(flag, " must be a finite number (got ", value, ")");
  (void)device();
  check_process_devices(*this);
  int k = ranks();
  if (epochs < 1) usage_fail("--epochs must be at least 1 (got ", epochs, ")");
  if (batch_size < 1) usage_fail("--batch-size must be at least 1 (got ", batch_size, ")");
  if (optimizer != "sgd" && optimizer != "adamw")
    usage_fail("--optimizer: unknown optimizer '", optimizer, "': use sgd or adamw");
  const float rate = effective_lr(), decay = effective_weight_decay();
  if (!(rate > 0) || !std::isfinite(rate)) usage_fail("--lr must be a positive number (got ", rate, ")");
  if (optimizer == "sgd") {
    if (momentum < 0 || momentum >= 1) usage_fail("--momentum must be in [0, 1) (got ", momentum, ")");
    if (nesterov && momentum <= 0)
      usage_fail("Nesterov momentum needs --momentum > 0 (got ", momentum, "): pass --no-nesterov or a momentum");
  } else {
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
      usage_fail("--betas must both be in [0, 1) (got ", beta1, ",", beta2, ")");
    if (!(eps >= 0) || !std::isfinite(eps)) usage_fail("--eps must be >= 0 (got ", eps, ")");
  }
  if (!(decay >= 0) || !std::isfinite(decay)) usage_fail("--weight-decay must be >= 0 (got ", decay, ")");
  if (label_smoothing < 0 || label_smoothing >= 1)
    usage_fail("--label-smoothing must be in [0, 1) (got ", label_smoothing, ")");
  if (threads < 0) usage_fail("--threads must be >= 0 (0 = every core; got ", threads, ")");
  // Far more threads than cores only thrash (and thousands fail to start): a stated bound.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads > kMaxThreadsPerCore * cores)
    usage_fail("--threads ", threads, " is more than ", kMaxThreadsPerCore, " per hardware thread of this machine (",
               cores, " hardware threads, so at most ", kMaxThreadsPerCore * cores, "); pass at most that, or 0 for "
               "every core");
  if (workers < 0) usage_fail("--workers must be >= 0 (got ", workers, ")");
  if (workers > kMaxWorkers)
    usage_fail("--workers ", workers, " is more than ", kMaxWorkers, " loader threads per rank; a few keep any model "
               "fed (the load phase shows whether more help)");
  if (max_steps < 0) usage_fail("--steps must be >= 0 (got ", max_steps, ")");
  if (warmup_steps < 0) usage_fail("--warmup must be >= 0 (got ", warmup_steps, ")");
  if (max_steps > 0 && warmup_steps >= max_steps * epochs)
    usage_fail("--warmup ", warmup_steps, " would exclude all ", max_steps * epochs, " steps (", epochs,
               " epochs of --steps ", max_steps, ") from the measurements: pass a smaller --warmup or more --steps");
  if (accumulate < 1) usage_fail("--accumulate must be at least 1 (got ", accumulate, ")");
  if (bucket_mb < 0) usage_fail("--bucket-mb must be >= 0 (0 = one all-reduce per tensor; got ", bucket_mb, ")");
  if (!(loss_threshold >= 0)) usage_fail("--loss-threshold must be >= 0 (0 = off; got ", loss_threshold, ")");
  if (!(log_interval_s >= 0)) usage_fail("--log-interval must be >= 0 seconds (got ", log_interval_s, ")");
  if (image_size < 0) usage_fail("--image-size must be positive (got ", image_size, ")");
  if (synthetic_size < 1) usage_fail("--synthetic-size must be at least 1 (got ", synthetic_size, ")");
  if (num_classes < 2) usage_fail("--classes must be at least 2 (got ", num_classes, ")");
  check_gpu_parallel(*this);
  if (parallel == ParallelMode::none && k > 1)
    usage_fail("--devices ", devices, " asks for ", k, " ranks but --parallel is none: pass --parallel ddp or dp");
  if (parallel != ParallelMode::none && batch_size % k != 0)
    usage_fail("--batch-size ", batch_size, " is not divisible by the ", k, " ranks of ",
               process_ranks > 0 ? "this MPI job" : "--devices " + devices, ": pass a multiple of ", k, " (e.g. ",
               (batch_size / k + 1) * k, ")");
  if (trace_first < 0 || trace_last < trace_first)
    usage_fail("--trace-steps must be a:b with 0 <= a <= b (got ", trace_first, ":", trace_last, ")");
  if (algo == "mpi" && !kMpiBuilt) fail_mpi_not_built("--algo mpi");
  if (algo == "nccl" && backend != "nccl")
    usage_fail("--algo nccl is NCCL's all-reduce: it needs --backend nccl (GPU ranks)");
  if (algo != "ring" && algo != "tree" && algo != "naive" && algo != "rhd" && algo != "hier" && algo != "mpi" &&
      algo != "nccl")
    usage_fail("--algo: unknown algorithm '", algo, "': use ", algorithm_choices());
  if (algo == "mpi" && process_ranks == 0 && parallel == ParallelMode::ddp)
    usage_fail("--algo mpi is the MPI library's all-reduce: it needs ranks that are MPI processes; run under mpirun "
               "(mpirun -np K dpx train ...), or pick one of dpx's algorithms (ring, tree, naive, rhd, hier)");
  if (!(comm_timeout_s > 0)) usage_fail("--comm-timeout must be a positive number of seconds (got ", comm_timeout_s, ")");
  if (const NetSim net = parse_net_sim(net_sim, "--net-sim"); net.enabled()) {
    // A bucket is at most one message's worth of bytes per exchange (a ring sends bucket / k).
    const size_t bucket_bytes = static_cast<size_t>(bucket_mb * 1024 * 1024);
    if (net.message_s(bucket_bytes) >= comm_timeout_s)
      usage_fail("--net-sim ", net_sim, ": one exchange of a ", bucket_mb, " MiB bucket would take ",
                 net.message_s(bucket_bytes), " s, beyond --comm-timeout ", comm_timeout_s,
                 " s: dial in a faster network, or raise --comm-timeout");
    if (parallel != ParallelMode::ddp)
      usage_fail("--net-sim simulates the network under DDP's all-reduces: pass --parallel ddp (DataParallel copies "
                 "through memory on one machine; one replica does not communicate)");
    if (algo == "mpi")
      usage_fail("--net-sim shapes the exchanges of dpx's own algorithms; --algo mpi calls the MPI library's "
                 "all-reduce, which it cannot reach: pick ring, tree, naive, rhd or hier");
  }
  if (checkpoint_every < 0) usage_fail("--checkpoint-every must be >= 0 steps (0: at the end of each epoch only; got ",
                                       checkpoint_every, ")");
  if (keep_checkpoints < 1) usage_fail("--keep must be at least 1 checkpoint (got ", keep_checkpoints, ")");
  if ((checkpoint_every > 0 || keep_checkpoints != 3) && checkpoint_dir.empty())
    usage_fail("--checkpoint-every and --keep need --checkpoint-dir, the folder the checkpoints go to");
  if (parallel == ParallelMode::dp && (!checkpoint_dir.empty() || !resume.empty()))
    usage_fail("--checkpoint-dir and --resume work with --parallel none and ddp, not with dp (DataParallel's master "
               "loop keeps no checkpoints yet)");
  if (on_nonfinite != "stop" && on_nonfinite != "skip" && on_nonfinite != "ignore")
    usage_fail("--on-nonfinite: unknown choice '", on_nonfinite, "': use stop, skip or ignore");
  check_mixed_precision(*this);
  if (cudnn_algo != "heuristic" && cudnn_algo != "search")
    usage_fail("--cudnn-algo: unknown choice '", cudnn_algo, "': use heuristic or search");
  if (cudnn_algo == "search" && !device().is_cuda())
    usage_fail("--cudnn-algo search chooses cuDNN's GPU convolution algorithms and needs --devices cuda:N; CPU "
               "convolutions choose theirs with --conv-algo");
  if (ranks_per_node < 0) usage_fail("--ranks-per-node must be >= 1, or 0 for the real nodes (got ", ranks_per_node, ")");
  if (lr_schedule != "constant" && lr_schedule != "cosine" && lr_schedule != "step")
    usage_fail("--lr-schedule: unknown schedule '", lr_schedule, "': use constant, cosine or step");
  if (dataset != "fashion-mnist" && dataset != "mnist" && dataset != "synthetic")
    usage_fail("--dataset: unknown data set '", dataset, "': use fashion-mnist, mnist or synthetic");
}

std::vector<std::pair<std::string, std::string>> TrainOptions::flag_values() const {
  auto num = [](auto v) {
    std::ostringstream os;
    os.precision(17);
    os << v;
    return os.str();
  };
  return {
      {"--model", model}, {"--dataset", dataset}, {"--data-dir", data_dir}, {"--image-size", num(image_size)},
      {"--channels", num(channels)}, {"--synthetic-size", num(synthetic_size)}, {"--classes", num(num_classes)},
      {"--weights", weights_file}, {"--weights-non-strict", num(!weights_strict)}, {"--save", save_file},
      {"--head", head}, {"--freeze-backbone", num(freeze_backbone)}, {"--epochs", num(epochs)},
      {"--batch-size", num(batch_size)}, {"--optimizer", optimizer}, {"--lr", num(effective_lr())},
      {"--weight-decay", num(effective_weight_decay())}, {"--momentum", num(momentum)},
      {"--label-smoothing", num(label_smoothing)}, {"--nesterov", num(nesterov)}, {"--betas", num(beta1) + "," + num(beta2)},
      {"--eps", num(eps)}, {"--lr-schedule", lr_schedule}, {"--seed", num(seed)}, {"--steps", num(max_steps)},
      {"--no-eval", num(!evaluate)}, {"--devices", devices}, {"--backend", backend}, {"--parallel", parallel_mode_name(parallel)},
      {"--algo", algo}, {"--bucket-mb", num(bucket_mb)}, {"--accumulate", num(accumulate)},
      {"--no-overlap", num(!overlap)}, {"--tf32", num(allow_tf32)}, {"--deterministic", num(deterministic)}, {"--conv-algo", conv_algo},
      {"--cudnn-algo", cudnn_algo}, {"--warmup", num(warmup_steps)},
      {"--loss-threshold", num(loss_threshold)}, {"--comm-timeout", num(comm_timeout_s)}, {"--net-sim", net_sim},
      {"--ranks-per-node", num(ranks_per_node)}, {"--trace", trace_file},
      {"--trace-steps", num(trace_first) + ":" + num(trace_last)}, {"--out", out_dir},
      {"--checkpoint-dir", checkpoint_dir}, {"--checkpoint-every", num(checkpoint_every)},
      {"--keep", num(keep_checkpoints)}, {"--resume", resume}, {"--on-nonfinite", on_nonfinite},
      {"--precision", precision}, {"--grad-dtype", grad_dtype}, {"--loss-scale", loss_scale},
      {"--initial-loss-scale", num(initial_loss_scale)}, {"--loss-scale-window", num(loss_scale_window)},
  };
}

float TrainOptions::effective_lr() const {
  if (lr) return *lr;
  return optimizer == "adamw" ? ops::AdamwParams{}.lr : 0.05f;
}

float TrainOptions::effective_weight_decay() const {
  if (weight_decay) return *weight_decay;
  return optimizer == "adamw" ? ops::AdamwParams{}.weight_decay : 0.f;
}

float TrainOptions::lr_at(int64_t step, int64_t total) const {
  const float lr = effective_lr();
  if (total <= 0 || lr_schedule == "constant") return lr;
  double t = static_cast<double>(std::min(step, total)) / static_cast<double>(total);
  if (lr_schedule == "cosine") return static_cast<float>(0.5 * lr * (1.0 + std::cos(M_PI * t)));
  return lr * (t < 0.5 ? 1.f : t < 0.75 ? 0.1f : 0.01f);
}

}  // namespace dpx::parallel
