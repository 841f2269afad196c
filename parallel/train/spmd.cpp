// SPMD training: every rank runs the same program, train_loop over its own replica
// (train_step.hpp). One rank alone is the single-replica run; k ranks, each with a Reducer over
// its data communicator, are DistributedDataParallel, the ranks made by the launch table
// (runtime/launch.hpp): threads of this process, MPI processes, GPUs (a thread or a process each,
// NCCL's communicators) or thread ranks on GPUs (p2p); votes, barriers and step records stay on
// each rank's host communicator.
#include <mutex>

#include "core/cuda/memory.hpp"
#include "core/data/loader.hpp"
#include "core/error.hpp"
#include "layers/optim.hpp"
#include "parallel/comm/gather.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"
#include "parallel/runtime/launch.hpp"
#include "parallel/train/device_env.hpp"
#include "parallel/train/grad_sync.hpp"
#include "parallel/train/reducer.hpp"
#include "parallel/train/train_step.hpp"

namespace dpx::parallel {

namespace {

// One SPMD rank: its device, its replica (rank 0's weights, as DDP's constructor broadcasts),
// its gradient reduction (a Reducer over its data communicator; none alone), optimizer and shard
// of the data, trained by the shared loop.
// `local_ranks`: the ranks of this process (Job::copy_initial frees the initial model after their copies).
void spmd_rank(Job& job, int local_ranks, const RankSetup& setup, const ReducerOptions& reducer, TrainReport& report,
               std::mutex& report_mu, const TrainHooks& hooks) {
  const TrainOptions& o = job.options;
  std::unique_ptr<DeviceEnv> env = make_device_env(setup.device, job.threads_per_rank, o.reference_kernels());
  apply_math(env->ctx(), o);
  // p2p replicas may share a GPU: each allocates from its own stream's pool (outlives every tensor below).
  const std::unique_ptr<cuda::AllocationStreamScope> pool =
      o.backend == Backend::p2p ? replica_allocation_scope(env->ctx()) : nullptr;
  nn::Model model = job.copy_initial(env->ctx().device, local_ranks);
  std::unique_ptr<GradSync> sync = std::make_unique<NoSync>();
  if (Communicator* data = setup.data) {
    data->broadcast(model.flat_params(), 0);
    for (auto& [name, buffer] : model.root().named_buffers()) data->broadcast(*buffer, 0);
    data->synchronize();  // a GPU's broadcast was queued on the communicator's stream
    sync = std::make_unique<Reducer>(*data, model, reducer, env->ctx());
  }
  std::unique_ptr<nn::Optimizer> optimizer = job.make_optimizer(model);
  data::LoaderOptions lo = job.train_loader(setup.rank, job.ranks, job.rank_batch);
  lo.device = env->ctx().device;  // on a GPU the loader copies each batch ahead of the step
  lo.stream = cuda::stream_of(env->ctx());
  data::DataLoader loader(job.train_set, lo);
  LocalReplica replica(model);
  Rank r(job, setup.rank, *env, replica, *sync, *optimizer, loader, setup.clock_offset_s);
  // --cuda-graph. Declared last, so destroyed first: a graph holding NCCL calls (DDP) keeps a
  // reference on their communicator, which NCCL's finalize and destroy wait for; the communicators
  // (launch_ranks') outlive this function.
  std::unique_ptr<GraphSteps> graphs;
  if (o.cuda_graph) {
    graphs = std::make_unique<GraphSteps>([&e = *env] { return e.make_recorder(); },
                                          Tensor::zeros({1}, DType::i64, env->ctx().device));
    r.graphs = graphs.get();
  }
  train_loop(r, setup.host, setup.data, report, report_mu, hooks);
  std::lock_guard<std::mutex> lock(report_mu);
  report.loader.add(loader.stats());
}

}  // namespace

void run_spmd(Job& job, TrainReport& report, const TrainHooks& hooks, Communicator* processes) {
  std::mutex report_mu;
  const TrainOptions& o = job.options;
  const ReducerOptions reducer{.bucket_cap_bytes = static_cast<size_t>(o.bucket_mb * 1024 * 1024),
                               .overlap = o.overlap,
                               .algo = o.algo,
                               .grad_dtype = o.grad_dtype};
  if (o.parallel == ParallelMode::none) {  // one replica, alone (under MPI: the job's one process)
    const RankSetup alone{0, o.device()};
    spmd_rank(job, 1, alone, reducer, report, report_mu, hooks);
    return;
  }
  LaunchSpec spec;
  spec.backend = o.effective_backend();
  spec.ranks = job.ranks;
  spec.device = o.device();
  spec.gpus = o.cuda_devices();
  spec.options.pin_threads = o.pin_threads;
  spec.options.timeout_s = o.comm_timeout_s;
  spec.options.ranks_per_node = o.ranks_per_node;
  spec.options.net_sim = parse_net_sim(o.net_sim, "--net-sim");
  spec.processes = processes;
  spec.launch = &report.launch;
  // Under MPI (`processes`, one process a rank: train() checks the sizes) each process runs one.
  const int local_ranks = processes ? 1 : job.ranks;
  launch_ranks(spec, [&](RankSetup& setup) { spmd_rank(job, local_ranks, setup, reducer, report, report_mu, hooks); });
  if (processes && processes->size() > 1) {  // rank 0 appends every other rank's, in rank order
    const auto steps = gather_records(*processes, report.steps);
    const auto spans = gather_records(*processes, report.trace_spans);
    for (size_t q = 1; q < steps.size(); ++q) {
      report.steps.insert(report.steps.end(), steps[q].begin(), steps[q].end());
      report.trace_spans.insert(report.trace_spans.end(), spans[q].begin(), spans[q].end());
    }
  }
  sort_steps(report.steps);
}

}  // namespace dpx::parallel
