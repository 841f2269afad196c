// Everything a training run is configured by. `dpx train` and `dpx bench` fill it from the
// command line, parsing each option that takes one of a few names into its enum there (the
// tables below); config.json records it. validate() rejects impossible configurations, the
// combinations of options that cannot run together in one table (kRefused, train_options.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/choices.hpp"
#include "core/context.hpp"
#include "core/data/image_dataset.hpp"
#include "core/device.hpp"
#include "core/dtype.hpp"
#include "kernels/ops.hpp"
#include "parallel/comm/algorithms/algorithms.hpp"
#include "parallel/comm/backend.hpp"
#include "parallel/train/loss_scaler.hpp"

namespace dpx::parallel {

enum class ParallelMode : uint8_t { none, dp, ddp };  // --parallel
inline constexpr Choices<ParallelMode, 3> kParallelModes = {
    {{ParallelMode::none, "none"}, {ParallelMode::dp, "dp"}, {ParallelMode::ddp, "ddp"}}};
enum class Precision : uint8_t { fp32, tf32, bf16, fp16 };  // --precision: the GPU compute's
inline constexpr Choices<Precision, 4> kPrecisions = {
    {{Precision::fp32, "fp32"}, {Precision::tf32, "tf32"}, {Precision::bf16, "bf16"}, {Precision::fp16, "fp16"}}};
// --memory-format: how the model's image maps lie in memory (nn::Model::set_memory_format).
inline constexpr Choices<ops::MemoryFormat, 2> kMemoryFormats = {
    {{ops::MemoryFormat::contiguous, "contiguous"}, {ops::MemoryFormat::channels_last, "channels_last"}}};
// --grad-dtype: the dtypes DDP's gradient all-reduce may travel in.
inline constexpr Choices<DType, 3> kGradDtypes = {{{DType::f32, "fp32"}, {DType::bf16, "bf16"}, {DType::f16, "fp16"}}};
enum class NonFinite : uint8_t { stop, skip, ignore };  // --on-nonfinite
inline constexpr Choices<NonFinite, 3> kNonFinite = {
    {{NonFinite::stop, "stop"}, {NonFinite::skip, "skip"}, {NonFinite::ignore, "ignore"}}};
enum class LrSchedule : uint8_t { constant, cosine, step };  // --lr-schedule
inline constexpr Choices<LrSchedule, 3> kLrSchedules = {
    {{LrSchedule::constant, "constant"}, {LrSchedule::cosine, "cosine"}, {LrSchedule::step, "step"}}};

// --loss-scale: auto (dynamic with fp16 gradients or compute, else none), dynamic, none, or a
// positive constant.
struct LossScale {
  enum class Kind : uint8_t { automatic, dynamic, none, constant } kind = Kind::automatic;
  float constant = 0;  // Kind::constant's scale
  bool operator==(const LossScale&) const = default;
};
// "auto", "dynamic", "none" or a number such as "1024"; throws dpx::UsageError naming --loss-scale.
LossScale parse_loss_scale(std::string_view text);
std::string loss_scale_name(const LossScale& s);

struct TrainOptions {
  // model and data
  std::string model = "lenet5";
  std::string dataset = "fashion-mnist";  // fashion-mnist | mnist | synthetic | imagefolder | tinyimagenet
  std::string data_dir;                   // empty: the default location of the data set
  int image_size = 0;                     // 0: the data set's own size (28 for MNIST; image folders 224, TinyImageNet 64)
  int channels = 0;                       // 0: the data set's own (1 for MNIST; 3 after --grey-to-rgb)
  int64_t synthetic_size = 8192;          // samples in the synthetic training set
  int num_classes = 10;
  data::ImageSetOptions images;           // image folders: transforms and bad files (tools/image_flags.hpp)
  // weights and transfer learning (zoo/weights.hpp, zoo/heads.hpp)
  std::string weights_file;               // safetensors state_dict to start from (torchvision names)
  bool weights_strict = true;             // false: missing and unexpected names are listed, not fatal
  std::string save_file;                  // where rank 0's (the master's) final state_dict goes
  std::string head = "default";           // default | linear | mlp4096: a new classifier
  bool freeze_backbone = false;           // train only the classifier
  // optimisation
  int epochs = 1;
  int64_t batch_size = 64;                // the global batch: split over the ranks
  std::string optimizer = "sgd";          // sgd | adamw (layers/optim.hpp)
  // Defaults: SGD with Nesterov momentum and a cosine schedule, which trains lenet5 to ≥ 90 %
  // on Fashion-MNIST in 3 epochs (benchmarks/RESULTS.md); the studies' setting (docs/ARCHITECTURE.md,
  // Studies) is --lr 0.01 --no-nesterov --lr-schedule constant. Unset lr and weight_decay take
  // the optimizer's default: SGD lr 0.05 and no weight decay; AdamW torch.optim.AdamW's lr 1e-3
  // and weight decay 1e-2.
  std::optional<float> lr, weight_decay;
  float momentum = 0.9f, label_smoothing = 0.f;  // momentum: SGD only
  bool nesterov = true;                          // SGD only
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // AdamW only (torch.optim.AdamW's defaults)
  LrSchedule lr_schedule = LrSchedule::cosine;
  uint64_t seed = 0;
  int64_t max_steps = 0;                  // per epoch; 0: the whole epoch
  bool evaluate = true;                   // test accuracy after each epoch
  // execution
  std::string devices = "cpu:1";          // cpu:K (K thread ranks), ref:K (the same on kernels/ref/), cuda:N,
                                          // or cuda:0,cuda:1 (a rank per GPU: --parallel ddp --backend nccl, or dp)
  // --backend: how DDP's ranks communicate: none given (threads for thread ranks, mpi under
  // mpirun), nccl (GPU ranks: NCCL's all-reduce; one thread per GPU, or one process per GPU under
  // mpirun) or p2p (thread ranks on GPUs).
  std::optional<Backend> backend;
  // Ranks that are MPI processes (parallel/comm/mpi/, parallel/runtime/mpi/): the launched world's size, or the size of a
  // bench configuration's part of it; 0 when not launched. Set from the launch, not a flag.
  int process_ranks = 0;
  int threads = 0;                        // CPU threads in all; 0: every core. Split over ranks.
  int workers = 2;                        // loader threads per rank
  ParallelMode parallel = ParallelMode::none;
  Algorithm algo = Algorithm::ring;       // --algo (nccl with --backend nccl)
  double comm_timeout_s = 300;            // a rank waiting longer in one collective reports a stall
  std::string net_sim;                    // --net-sim RATE,LATENCY: DDP's exchanges as on that network (net_sim.hpp)
  int ranks_per_node = 0;                 // hier: nodes of this many consecutive ranks (0: the real ones)
  double bucket_mb = 25;
  int accumulate = 1;
  bool overlap = true;
  bool pin_threads = false;
  bool allow_tf32 = false;                // --tf32: TF32 tensor-core math on GPUs
  bool deterministic = false;             // --deterministic: GPU runs repeat bit for bit (kernels/determinism.hpp)
  std::string cudnn_algo = "heuristic";   // --cudnn-algo heuristic | search: how cuDNN's convolution algorithms are chosen
  bool cuda_graph = false;                // --cuda-graph: forward, loss and backward replayed as a CUDA graph (graph_step.hpp)
  bool graph_rehearsal = false;           // tests only, no flag: --cuda-graph on CPU ranks, rehearsed (graph_step.hpp)
  ops::MemoryFormat memory_format = ops::MemoryFormat::contiguous;  // --memory-format (kMemoryFormats)
  // Mixed precision (docs/data-parallelism.md, Mixed precision). The weights and the optimizer stay fp32.
  Precision precision = Precision::fp32;  // --precision: the compute's
  DType grad_dtype = DType::f32;          // --grad-dtype: DDP's gradient all-reduce (kGradDtypes)
  LossScale loss_scale;                   // --loss-scale
  float initial_loss_scale = 65536.f;     // --initial-loss-scale: where dynamic scaling starts (2^16)
  int64_t loss_scale_window = 2000;       // --loss-scale-window: good updates before the scale doubles
  std::string conv_algo = "auto";         // --conv-algo: CPU convolutions (kernels/cpu/conv2d_algos.hpp)
  bool verbose = false;                   // --verbose: also print the choices made per shape
  int warmup_steps = 2;                   // excluded from summaries
  double loss_threshold = 0;              // report when the loss first falls below; 0: off
  double log_interval_s = 2;              // progress line cadence
  // checkpoints and resume (checkpoint.hpp), divergence guard
  std::string checkpoint_dir;             // where checkpoints go; empty: none
  int64_t checkpoint_every = 0;           // steps between checkpoints (and one per epoch); 0: per epoch only
  int keep_checkpoints = 3;               // the newest kept
  std::string resume;                     // a checkpoint file, a folder (its newest), or "auto" (job.cpp)
  NonFinite on_nonfinite = NonFinite::stop;  // --on-nonfinite: a non-finite loss or gradient
  std::string trace_file;                 // Chrome trace (Perfetto)
  int64_t trace_first = 0, trace_last = 20;
  std::string out_dir;

  // Parsed view of `devices`: the first device of a list.
  Device device() const;
  // The GPUs of a cuda:N or cuda:0,cuda:1 list, one per thread rank (empty for CPU devices, and
  // for "cuda" alone: under a launcher each process takes its node-local GPU).
  std::vector<int> cuda_devices() const;
  int ranks() const;
  // ref or ref:K: host ranks whose ops run the plain reference kernels (kernels/ref/).
  bool reference_kernels() const;
  void validate() const;  // throws dpx::UsageError
  // The backend the ranks communicate with: --backend, or threads (mpi under a launcher).
  Backend effective_backend() const;
  DType compute_dtype() const;            // what --precision rounds GPU GEMM/conv operands to (f32: none)
  // The loss scaling asked for; none when `loss_scale` is none, or auto without fp16 anywhere.
  std::optional<LossScaleOptions> loss_scaling() const;
  // Every option that shapes the run, as (flag, value): what the ranks of an MPI job must agree on.
  std::vector<std::pair<std::string, std::string>> flag_values() const;
  float effective_lr() const;            // lr, or the optimizer's default
  float effective_weight_decay() const;  // weight_decay, or the optimizer's default
  // The learning rate of optimizer step `step` of `total`: constant; cosine (annealed from lr
  // to 0 over the run, as torch.optim.lr_scheduler.CosineAnnealingLR with T_max = total);
  // step (divided by 10 at 50 % and again at 75 % of the run).
  float lr_at(int64_t step, int64_t total) const;  // from effective_lr()
  // The same run for measuring it (dpx predict's profiles, --batch-sizes max): one epoch, no
  // evaluation, no files (checkpoints, trace, --out, --save), no resume, no progress lines.
  TrainOptions measuring_run() const;
};

// The math `o` asks of a rank's device, set on its Context: --deterministic, and on GPUs --tf32
// and --precision's compute dtype. Refuses (UsageError) a precision the GPU lacks (bf16 before
// Ampere), and on GPUs a bad DPX_HALF_MAPS or DPX_CUDNN_ENGINES.
void apply_math(Context& ctx, const TrainOptions& o);
// DPX_HALF_MAPS's value (null where unset) as Context::half_maps: unset, empty or 1 true, 0 false;
// anything else a usage error naming the variable.
bool half_maps_from_env(const char* value);

}  // namespace dpx::parallel
