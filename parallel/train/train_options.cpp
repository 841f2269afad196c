// TrainOptions: the options' names, validate() with the one table of refused combinations, and
// what the options work out to (the learning rate of a step, the loss scaling, the math).
#include "parallel/train/train_options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "core/cuda/memory.hpp"
#include "core/data/datasets.hpp"
#include "core/error.hpp"
#include "core/gpu_status.hpp"
#include "kernels/determinism.hpp"
#include "kernels/ops.hpp"
#include "parallel/comm/nccl/nccl_backend.hpp"
#include "parallel/comm/net_sim.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"

namespace dpx::parallel {

namespace {
constexpr int kMaxThreadsPerCore = 16;
constexpr int kMaxWorkers = 256;
}  // namespace

LossScale parse_loss_scale(std::string_view text) {
  if (text == "auto") return {};
  if (text == "dynamic") return {LossScale::Kind::dynamic};
  if (text == "none") return {LossScale::Kind::none};
  float scale = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), scale);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || !(scale > 0) || !std::isfinite(scale))
    usage_fail("--loss-scale '", text, "': use auto (dynamic with fp16 gradients, else none), dynamic, none, "
               "or a positive constant such as 1024");
  return {LossScale::Kind::constant, scale};
}

std::string loss_scale_name(const LossScale& s) {
  switch (s.kind) {
    case LossScale::Kind::automatic: return "auto";
    case LossScale::Kind::dynamic: return "dynamic";
    case LossScale::Kind::none: return "none";
    case LossScale::Kind::constant: {
      std::ostringstream os;
      os.precision(9);
      os << s.constant;
      return os.str();
    }
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
  // "cuda" alone (under a launcher: each process takes its node's GPU, launch.cpp) names none.
  if (devices == "cuda" || devices.substr(0, devices.find(':')) != "cuda") return {};
  return parse_cuda_device_list(devices, "--devices", backend == Backend::p2p);
}

bool TrainOptions::reference_kernels() const { return devices.substr(0, devices.find(':')) == "ref"; }

int TrainOptions::ranks() const {
  auto colon = devices.find(':');
  std::string kind = devices.substr(0, colon);
  if (process_ranks > 0) return process_ranks;
  if (devices == "cuda")
    usage_fail("--devices cuda names no GPU here: it is for MPI launches (srun, mpirun) with --backend nccl, each ",
               "process on its node's GPU; name the GPUs: --devices cuda:0, or cuda:0,cuda:1 (a rank each)");
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

Backend TrainOptions::effective_backend() const {
  return backend ? *backend : process_ranks > 0 ? Backend::mpi : Backend::threads;
}

namespace {

bool gpus(const TrainOptions& o) { return o.device().is_cuda() || (o.backend == Backend::nccl && o.devices == "cuda"); }

// The ranks --devices asks for in one process (cpu:K: K), whatever the launcher.
int threads_asked(const TrainOptions& o) {
  TrainOptions plain = o;
  plain.process_ranks = 0;
  return plain.ranks();
}

std::string name(Algorithm a) { return std::string(algorithm_name(a)); }
std::string name(DType d) { return std::string(choice_name(kGradDtypes, d)); }
std::string name(Precision p) { return std::string(choice_name(kPrecisions, p)); }

// The combinations of options that cannot run together, each with its reason, in the order
// validate() tries them (docs/data-parallelism.md, "Options that cannot run together", lists them).
struct Refusal {
  // What a refusal says: a fixed text, or one built from the values of the options.
  struct Says {
    Says(const char* text) : text(text) {}
    template <class Build>
    Says(Build build) : build(+build) {}
    std::string operator()(const TrainOptions& o) const { return build ? build(o) : std::string(text); }
    const char* text = nullptr;
    std::string (*build)(const TrainOptions&) = nullptr;
  };
  bool (*applies)(const TrainOptions& o);
  Says says;
};

const Refusal kRefused[] = {
    // ---- ranks that are MPI processes: each one rank
    {[](const TrainOptions& o) { return o.process_ranks > 0 && o.backend == Backend::nccl && o.devices != "cuda"; },
     [](const TrainOptions& o) {
       return detail::concat("--devices ", o.devices, " under MPI with --backend nccl: each process drives the GPU of ",
                             "its local rank; pass --devices cuda");
     }},
    {[](const TrainOptions& o) {
       return o.process_ranks > 1 && o.backend != Backend::nccl && o.device().is_cuda();
     },
     [](const TrainOptions& o) {
       return detail::concat("--devices ", o.devices, " under MPI: GPU ranks in several processes communicate with ",
                             "NCCL: pass --backend nccl --devices cuda (each process drives its local rank's GPU)");
     }},
    {[](const TrainOptions& o) {
       return o.process_ranks > 0 && o.backend != Backend::nccl && threads_asked(o) != 1 &&
              threads_asked(o) != o.process_ranks;
     },
     [](const TrainOptions& o) {
       return detail::concat("--devices ", o.devices, " under MPI with ", o.process_ranks, " processes: each process ",
                             "is one rank here, so the job has ", o.process_ranks, " ranks (mpirun -np K or srun -n K ",
                             "sets them); cpu:K asks for K thread ranks inside one process, which is the other way to ",
                             "get ranks (dpx train --devices cpu:K, without mpirun). Drop --devices, or pass cpu:",
                             o.process_ranks);
     }},
    {[](const TrainOptions& o) { return o.process_ranks > 0 && o.backend != Backend::nccl && o.pin_threads; },
     "--pin-threads pins thread ranks to cores; under MPI the launcher binds each process (e.g. "
     "mpirun --bind-to core, srun --cpu-bind=cores)"},
    {[](const TrainOptions& o) {
       return o.process_ranks > 0 && o.backend != Backend::nccl && o.parallel == ParallelMode::dp;
     },
     "--parallel dp under MPI: DataParallel runs its replicas as threads of one process (a master "
     "scatters each batch to them); across processes use --parallel ddp, or run dp without "
     "mpirun (--devices cpu:K)"},
    {[](const TrainOptions& o) {
       return o.process_ranks > 1 && o.backend != Backend::nccl && o.parallel == ParallelMode::none;
     },
     [](const TrainOptions& o) {
       return detail::concat("--parallel none under MPI with ", o.process_ranks, " processes: every process would ",
                             "train its own replica alone; pass --parallel ddp (the default under mpirun), or run one ",
                             "process");
     }},
    // ---- --backend
    {[](const TrainOptions& o) { return o.backend == Backend::nccl && !kNcclBuilt; },
     "--backend nccl: not built (this dpx has no CUDA backend; configure with -DDPX_CUDA=ON on a "
     "machine with CUDA, cuDNN and NCCL, or set CUDNN_ROOT and NCCL_ROOT); train on CPU ranks "
     "with --devices cpu:K --parallel ddp instead"},
    {[](const TrainOptions& o) { return o.backend == Backend::p2p && !kP2PBuilt; },
     [](const TrainOptions&) { return "--backend p2p: " + p2p_unavailable_reason(); }},
    {[](const TrainOptions& o) { return o.backend == Backend::mpi && o.process_ranks == 0; },
     "--backend mpi: every rank is a process, started by an MPI launcher: run dpx under mpirun "
     "or srun"},
    {[](const TrainOptions& o) { return o.backend == Backend::threads && o.process_ranks > 1; },
     "--backend threads under MPI: the ranks are the processes; leave --backend out"},
    {[](const TrainOptions& o) { return o.backend == Backend::nccl && !gpus(o); },
     "--backend nccl runs one rank per GPU: pass --devices cuda:0,cuda:1 (one process, a thread "
     "per GPU), or --devices cuda under mpirun (a process per GPU)"},
    {[](const TrainOptions& o) { return o.backend == Backend::nccl && o.parallel != ParallelMode::ddp; },
     "--backend nccl is DDP's all-reduce over GPUs: pass --parallel ddp (--parallel dp copies "
     "between GPUs without it)"},
    {[](const TrainOptions& o) { return o.backend == Backend::nccl && !o.net_sim.empty(); },
     "--net-sim shapes the exchanges of dpx's own algorithms; NCCL's are out of its reach: drop "
     "--net-sim"},
    {[](const TrainOptions& o) { return o.backend == Backend::nccl && o.algo != Algorithm::nccl; },
     [](const TrainOptions& o) {
       return detail::concat("--algo ", name(o.algo), " with --backend nccl: NCCL chooses its own algorithm ",
                             "(NCCL_ALGO=Ring|Tree sets it); pass --algo nccl or leave --algo out");
     }},
    {[](const TrainOptions& o) { return o.backend == Backend::p2p && !o.device().is_cuda(); },
     "--backend p2p runs thread ranks on GPUs, several on one GPU if you like: pass --devices "
     "cuda:0,cuda:0 (two replicas on GPU 0) or cuda:0,cuda:1"},
    {[](const TrainOptions& o) { return o.backend == Backend::p2p && o.process_ranks > 0; },
     "--backend p2p: its ranks are threads of one process; under mpirun use --backend nccl"},
    {[](const TrainOptions& o) { return o.backend == Backend::p2p && o.parallel != ParallelMode::ddp; },
     "--backend p2p is DDP's all-reduce over GPU replicas: pass --parallel ddp"},
    {[](const TrainOptions& o) { return o.backend == Backend::p2p && o.grad_dtype != DType::f32; },
     [](const TrainOptions& o) {
       return detail::concat("--grad-dtype ", name(o.grad_dtype), " with --backend p2p: not run on a GPU yet (the ",
                             "Reducer narrows for every backend, but p2p's half-precision all-reduce has never run); ",
                             "use --backend nccl, or drop --grad-dtype");
     }},
    {[](const TrainOptions& o) { return o.backend == Backend::p2p && !o.checkpoint_dir.empty(); },
     "--checkpoint-dir with --backend p2p: not run on a GPU yet (p2p's ranks have a host "
     "communicator for the checkpoint's gathering, never tried); use --backend nccl, or leave "
     "checkpoints out"},
    {[](const TrainOptions& o) { return o.backend == Backend::p2p && is_library_algorithm(o.algo); },
     [](const TrainOptions& o) {
       return detail::concat("--algo ", name(o.algo), " with --backend p2p: p2p runs dpx's own algorithms (ring, ",
                             "tree, naive, rhd, hier)");
     }},
    {[](const TrainOptions& o) {
       return o.backend != Backend::nccl && o.backend != Backend::p2p && o.device().is_cuda() &&
              o.parallel == ParallelMode::ddp;
     },
     [](const TrainOptions& o) {
       return detail::concat("--devices ", o.devices, " with --parallel ddp: DDP over GPUs all-reduces with NCCL: add ",
                             "--backend nccl (or --backend p2p: dpx's algorithms over device copies, several replicas ",
                             "on one GPU allowed)");
     }},
    {[](const TrainOptions& o) {
       return o.backend != Backend::nccl && o.backend != Backend::p2p && o.device().is_cuda() &&
              o.parallel == ParallelMode::dp && o.cuda_devices().size() < 2;
     },
     [](const TrainOptions& o) {
       return detail::concat("--devices ", o.devices, " with --parallel dp: DataParallel needs two GPUs or more ",
                             "(--devices cuda:0,cuda:1), or CPU replicas (--devices cpu:K)");
     }},
    // ---- ranks, --algo, --net-sim, checkpoints
    {[](const TrainOptions& o) { return o.parallel == ParallelMode::none && o.ranks() > 1; },
     [](const TrainOptions& o) {
       return detail::concat("--devices ", o.devices, " asks for ", o.ranks(), " ranks but --parallel is none: pass ",
                             "--parallel ddp or dp");
     }},
    {[](const TrainOptions& o) { return o.parallel != ParallelMode::none && o.batch_size % o.ranks() != 0; },
     [](const TrainOptions& o) {
       const int k = o.ranks();
       return detail::concat("--batch-size ", o.batch_size, " is not divisible by the ", k, " ranks of ",
                             o.process_ranks > 0 ? "this MPI job" : "--devices " + o.devices, ": pass a multiple of ",
                             k, " (e.g. ", (o.batch_size / k + 1) * k, ")");
     }},
    {[](const TrainOptions& o) { return o.algo == Algorithm::nccl && o.backend != Backend::nccl; },
     "--algo nccl is NCCL's all-reduce: it needs --backend nccl (GPU ranks)"},
    {[](const TrainOptions& o) {
       return o.algo == Algorithm::mpi && o.process_ranks == 0 && o.parallel == ParallelMode::ddp;
     },
     "--algo mpi is the MPI library's all-reduce: it needs ranks that are MPI processes; run "
     "under mpirun (mpirun -np K dpx train ...), or pick one of dpx's algorithms (ring, tree, "
     "naive, rhd, hier)"},
    {[](const TrainOptions& o) {
       const NetSim net = parse_net_sim(o.net_sim, "--net-sim");
       return net.enabled() && net.message_s(static_cast<size_t>(o.bucket_mb * 1024 * 1024)) >= o.comm_timeout_s;
     },
     [](const TrainOptions& o) {
       // A bucket is at most one message's worth of bytes per exchange (a ring sends bucket / k).
       const double s = parse_net_sim(o.net_sim, "--net-sim").message_s(static_cast<size_t>(o.bucket_mb * 1024 * 1024));
       return detail::concat("--net-sim ", o.net_sim, ": one exchange of a ", o.bucket_mb, " MiB bucket would take ", s,
                             " s, beyond --comm-timeout ", o.comm_timeout_s, " s: dial in a faster network, or raise ",
                             "--comm-timeout");
     }},
    {[](const TrainOptions& o) { return !o.net_sim.empty() && o.parallel != ParallelMode::ddp; },
     "--net-sim simulates the network under DDP's all-reduces: pass --parallel ddp "
     "(DataParallel copies through memory on one machine; one replica does not communicate)"},
    {[](const TrainOptions& o) { return !o.net_sim.empty() && o.algo == Algorithm::mpi; },
     "--net-sim shapes the exchanges of dpx's own algorithms; --algo mpi calls the MPI "
     "library's all-reduce, which it cannot reach: pick ring, tree, naive, rhd or hier"},
    {[](const TrainOptions& o) { return (o.checkpoint_every > 0 || o.keep_checkpoints != 3) && o.checkpoint_dir.empty(); },
     "--checkpoint-every and --keep need --checkpoint-dir, the folder the checkpoints go to"},
    {[](const TrainOptions& o) { return o.resume == "auto" && o.checkpoint_dir.empty(); },
     "--resume auto continues from the newest checkpoint in --checkpoint-dir: pass --checkpoint-dir too "
     "(a file or folder named auto: ./auto)"},
    {[](const TrainOptions& o) {
       return o.parallel == ParallelMode::dp && (!o.checkpoint_dir.empty() || !o.resume.empty());
     },
     "--checkpoint-dir and --resume work with --parallel none and ddp, not with dp "
     "(DataParallel's master loop keeps no checkpoints yet)"},
    // ---- mixed precision (docs/data-parallelism.md, Mixed precision)
    {[](const TrainOptions& o) { return o.precision != Precision::fp32 && !o.device().is_cuda(); },
     [](const TrainOptions& o) {
       return detail::concat("--precision ", name(o.precision), " needs --devices cuda:N: dpx's CPU kernels compute ",
                             "in fp32 (", name(o.precision), " is GPU tensor-core math); on CPU ranks, --grad-dtype ",
                             "bf16 or fp16 all-reduces the gradients in half precision");
     }},
    {[](const TrainOptions& o) { return o.grad_dtype != DType::f32 && o.parallel == ParallelMode::none; },
     [](const TrainOptions& o) {
       return detail::concat("--grad-dtype ", name(o.grad_dtype), " is the dtype of DDP's gradient all-reduce, and ",
                             "--parallel none has none: pass --parallel ddp (with --devices cpu:K or under mpirun), ",
                             "or drop --grad-dtype");
     }},
    {[](const TrainOptions& o) { return o.grad_dtype != DType::f32 && o.parallel == ParallelMode::dp; },
     [](const TrainOptions& o) {
       return detail::concat("--grad-dtype ", name(o.grad_dtype), ": DataParallel sums its replicas' gradients ",
                             "through memory, in fp32, with no all-reduce to narrow; pass --parallel ddp, or drop ",
                             "--grad-dtype");
     }},
    // ---- --cuda-graph (graph_step.hpp)
    {[](const TrainOptions& o) { return o.cuda_graph && !o.device().is_cuda() && !o.graph_rehearsal; },
     "--cuda-graph replays a GPU's training step as a CUDA graph: it needs --devices cuda:N (CPU ops run "
     "when they are called; there is no launch to save)"},
    {[](const TrainOptions& o) { return o.cuda_graph && o.parallel == ParallelMode::dp; },
     "--cuda-graph with --parallel dp: DataParallel copies its replicas' gradients between GPUs after "
     "their backward, which the graph of one GPU's step does not record; use --parallel ddp --backend "
     "nccl, or drop --cuda-graph"},
    {[](const TrainOptions& o) {
       return o.cuda_graph && o.parallel == ParallelMode::ddp && o.effective_backend() == Backend::p2p;
     },
     "--cuda-graph with --backend p2p: p2p's all-reduces run on a host thread, which a CUDA graph cannot "
     "record; use --backend nccl (its calls are recorded into the graph), or drop --cuda-graph"},
    {[](const TrainOptions& o) { return o.cuda_graph && o.loss_scaling().has_value(); },
     "--cuda-graph with loss scaling (--precision fp16 turns it on): the scale changes between steps, and a "
     "replay keeps the one it recorded; use --precision bf16, or --loss-scale none, or drop --cuda-graph"},
    {[](const TrainOptions& o) { return o.cudnn_algo == "search" && !o.device().is_cuda(); },
     "--cudnn-algo search chooses cuDNN's GPU convolution algorithms and needs --devices cuda:N; "
     "CPU convolutions choose theirs with --conv-algo"},
};

}  // namespace

bool half_maps_from_env(const char* value) {
  if (!value || !*value || std::string(value) == "1") return true;
  if (std::string(value) == "0") return false;
  usage_fail("DPX_HALF_MAPS='", value, "': use 1 (the default: under --precision bf16|fp16 the maps between "
             "convolutions, batch norms and ReLUs are kept in that precision) or 0 (kept fp32)");
}

DType TrainOptions::compute_dtype() const {
  if (precision == Precision::bf16) return DType::bf16;
  if (precision == Precision::fp16) return DType::f16;
  return DType::f32;
}

void apply_math(Context& ctx, const TrainOptions& o) {
  ctx.deterministic = o.deterministic;
  if (!ctx.device.is_cuda()) return;
  ctx.allow_tf32 = o.allow_tf32;
  ctx.conv_search = o.cudnn_algo == "search";
  ctx.compute = o.compute_dtype();
  ctx.half_maps = half_maps_from_env(std::getenv("DPX_HALF_MAPS"));
  kernels::parse_engine_rule(std::getenv("DPX_CUDNN_ENGINES"));  // a bad value refused here, not at a first convolution
  if (ctx.compute == DType::f32) return;  // fp32 and TF32 run on any GPU
  const std::string why = precision_unsupported_reason(choice_name(kPrecisions, o.precision),
                                                       cuda::compute_capability(ctx.device.index), ctx.device.index);
  if (!why.empty()) usage_fail(why);
}

std::optional<LossScaleOptions> TrainOptions::loss_scaling() const {
  LossScaleOptions dynamic{.dynamic = true, .init_scale = initial_loss_scale, .growth_interval = loss_scale_window};
  switch (loss_scale.kind) {
    case LossScale::Kind::dynamic: return dynamic;
    case LossScale::Kind::none: return std::nullopt;
    case LossScale::Kind::constant: return LossScaleOptions{.dynamic = false, .init_scale = loss_scale.constant};
    case LossScale::Kind::automatic: break;
  }
  if (grad_dtype == DType::f16 || precision == Precision::fp16) return dynamic;
  return std::nullopt;
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
  (void)ranks();
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
  if (trace_first < 0 || trace_last < trace_first)
    usage_fail("--trace-steps must be a:b with 0 <= a <= b (got ", trace_first, ":", trace_last, ")");
  if (!(comm_timeout_s > 0)) usage_fail("--comm-timeout must be a positive number of seconds (got ", comm_timeout_s, ")");
  (void)parse_net_sim(net_sim, "--net-sim");
  if (checkpoint_every < 0) usage_fail("--checkpoint-every must be >= 0 steps (0: at the end of each epoch only; got ",
                                       checkpoint_every, ")");
  if (keep_checkpoints < 1) usage_fail("--keep must be at least 1 checkpoint (got ", keep_checkpoints, ")");
  if (!(initial_loss_scale > 0) || !std::isfinite(initial_loss_scale))
    usage_fail("--initial-loss-scale must be a positive number (got ", initial_loss_scale, ")");
  if (loss_scale_window < 1) usage_fail("--loss-scale-window must be at least 1 update (got ", loss_scale_window, ")");
  if (cudnn_algo != "heuristic" && cudnn_algo != "search")
    usage_fail("--cudnn-algo: unknown choice '", cudnn_algo, "': use heuristic or search");
  if (ranks_per_node < 0) usage_fail("--ranks-per-node must be >= 1, or 0 for the real nodes (got ", ranks_per_node, ")");
  const auto& names = data::dataset_names();
  if (std::find(names.begin(), names.end(), dataset) == names.end())
    usage_fail("--dataset: unknown data set '", dataset, "': use fashion-mnist, mnist, synthetic, imagefolder or "
               "tinyimagenet");
  for (const Refusal& r : kRefused)
    if (r.applies(*this)) usage_fail(r.says(*this));
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
      {"--eps", num(eps)}, {"--lr-schedule", std::string(choice_name(kLrSchedules, lr_schedule))}, {"--seed", num(seed)}, {"--steps", num(max_steps)},
      {"--no-eval", num(!evaluate)}, {"--devices", devices},
      {"--backend", backend ? std::string(choice_name(kBackends, *backend)) : ""},
      {"--parallel", std::string(choice_name(kParallelModes, parallel))}, {"--algo", std::string(algorithm_name(algo))}, {"--bucket-mb", num(bucket_mb)}, {"--accumulate", num(accumulate)},
      {"--no-overlap", num(!overlap)}, {"--tf32", num(allow_tf32)}, {"--deterministic", num(deterministic)}, {"--conv-algo", conv_algo},
      {"--cudnn-algo", cudnn_algo}, {"--cuda-graph", num(cuda_graph)},
      {"--memory-format", std::string(choice_name(kMemoryFormats, memory_format))}, {"--warmup", num(warmup_steps)},
      {"--loss-threshold", num(loss_threshold)}, {"--comm-timeout", num(comm_timeout_s)}, {"--net-sim", net_sim},
      {"--ranks-per-node", num(ranks_per_node)}, {"--trace", trace_file},
      {"--trace-steps", num(trace_first) + ":" + num(trace_last)}, {"--out", out_dir},
      {"--checkpoint-dir", checkpoint_dir}, {"--checkpoint-every", num(checkpoint_every)},
      {"--keep", num(keep_checkpoints)}, {"--resume", resume},
      {"--on-nonfinite", std::string(choice_name(kNonFinite, on_nonfinite))},
      {"--precision", std::string(choice_name(kPrecisions, precision))},
      {"--grad-dtype", std::string(choice_name(kGradDtypes, grad_dtype))}, {"--loss-scale", loss_scale_name(loss_scale)},
      {"--initial-loss-scale", num(initial_loss_scale)}, {"--loss-scale-window", num(loss_scale_window)},
      {"--workers", num(workers)}, {"--resize-size", num(images.transform.resize_size)},
      {"--crop-scale", num(images.transform.scale_min) + "," + num(images.transform.scale_max)},
      {"--crop-ratio", num(images.transform.ratio_min) + "," + num(images.transform.ratio_max)},
      {"--flip", num(images.transform.flip_p)},
      {"--mean", num(images.transform.mean[0]) + "," + num(images.transform.mean[1]) + "," + num(images.transform.mean[2])},
      {"--std", num(images.transform.std[0]) + "," + num(images.transform.std[1]) + "," + num(images.transform.std[2])},
      {"--no-dct-scaling", num(!images.transform.dct_scaling)},
      {"--on-bad-image", data::bad_image_policy_name(images.on_bad_image)},
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

TrainOptions TrainOptions::measuring_run() const {
  TrainOptions o = *this;
  o.epochs = 1;
  o.evaluate = false;
  o.loss_threshold = 0;
  o.checkpoint_dir.clear();
  o.resume.clear();
  o.trace_file.clear();
  o.out_dir.clear();
  o.save_file.clear();
  o.log_interval_s = 1e9;
  return o;
}

float TrainOptions::lr_at(int64_t step, int64_t total) const {
  const float lr = effective_lr();
  if (total <= 0 || lr_schedule == LrSchedule::constant) return lr;
  double t = static_cast<double>(std::min(step, total)) / static_cast<double>(total);
  if (lr_schedule == LrSchedule::cosine) return static_cast<float>(0.5 * lr * (1.0 + std::cos(M_PI * t)));
  return lr * (t < 0.5 ? 1.f : t < 0.75 ? 0.1f : 0.01f);
}

}  // namespace dpx::parallel
